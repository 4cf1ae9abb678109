"""Access control: users and ACL rules (acl.py), per-command ACL data (categories.py),
protected mode (protected.py)."""

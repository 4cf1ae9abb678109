"""Access control: users and ACL rules (acl.py), their enforcement per request
(enforce.py), protected mode (protected.py).  The per-command ACL data is part of
the command table (dispatch/categories.py)."""

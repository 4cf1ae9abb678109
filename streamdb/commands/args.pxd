# The compiled form of args.py calls the id parser it uses most in C (ids.pxd).

from streamdb.engine.ids cimport parse_strict_id

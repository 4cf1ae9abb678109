# The compiled form of registry.py: CommandSpec's and the CommandTable's attributes
# as C fields and the look-up as a C call, for the compiled dispatch (server/core.py
# cimports this).

cimport cython

cdef class CommandSpec:
    cdef public str name, group, grammar, since
    cdef public Py_ssize_t arity, first_key, last_key, key_step
    cdef public object flags, handler, key_finder
    cdef public tuple acl_categories
    cdef public dict subcommands
    cdef readonly bint is_write

@cython.final
cdef class CommandTable:
    cdef dict _commands, _by_raw
    cdef readonly object view
    cdef bytes _last_raw
    cdef CommandSpec _last_spec

    cdef CommandSpec find(self, argv)

cpdef CommandSpec lookup(argv)
cpdef CommandSpec resolve(argv)

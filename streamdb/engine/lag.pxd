# The compiled form of lag.py sees a Stream's C type: a metrics scrape asks each
# group's lag, time lag and oldest pending age, and reads the stream's fields and
# its nodes' methods without look-ups.  Only cimports: lag.py has no classes.

from streamdb.engine.stream cimport Node, Stream

"""Redis's documentation of each command, as COMMAND DOCS gives it: summary, group,
complexity, deprecation and history.  ``since`` stays in the command table
(``@command(..., since=)``), next to arity and flags; the grammar of a command's
arguments is its handler's docstring (``registry.command_arguments``).

The texts are Redis's own (src/commands/*.json as 7.0 ships them); a history line
names the Redis release that changed the command, so a command or option added later
adds its line here, in the same commit as the code.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CommandDoc", "DOCS", "GrammarError", "grammar_arguments"]


@dataclass(frozen=True)
class CommandDoc:
    summary: str
    group: str
    complexity: str = ""
    deprecated: tuple[str, str] | None = None      # (since, replaced by)
    history: tuple[tuple[str, str], ...] = ()
    syscmd: bool = False                            # "not meant for users" (REPLCONF, DEBUG)

    @property
    def doc_flags(self) -> list[str]:
        return ["deprecated"] * bool(self.deprecated) + ["syscmd"] * self.syscmd


def _doc(summary: str, group: str, complexity: str = "", deprecated=None, history=(),
         syscmd: bool = False) -> CommandDoc:
    return CommandDoc(summary, group, complexity, deprecated, history, syscmd)


# "name" or "parent|subcommand" -> its documentation
DOCS: dict[str, CommandDoc] = {
    'acl': _doc('A container for Access List Control commands ', 'server',
         complexity='Depends on subcommand.'),
    'acl|cat': _doc('List the ACL categories or the commands inside a category', 'server',
         complexity='O(1) since the categories and commands are a fixed set.'),
    'acl|deluser': _doc('Remove the specified ACL users and the associated rules', 'server',
         complexity='O(1) amortized time considering the typical user.'),
    'acl|dryrun': _doc('Returns whether the user can execute the given command without executing the command.', 'server',
         complexity='O(1).'),
    'acl|genpass': _doc('Generate a pseudorandom secure password to use for ACL users', 'server',
         complexity='O(1)'),
    'acl|getuser': _doc('Get the rules for a specific ACL user', 'server',
         complexity='O(N). Where N is the number of password, command and pattern rules that the user has.',
         history=(
             ('6.2.0', 'Added Pub/Sub channel patterns.'),
             ('7.0.0', 'Added selectors and changed the format of key and channel patterns from a list to their rule representation.'),)),
    'acl|help': _doc('Show helpful text about the different subcommands', 'server',
         complexity='O(1)'),
    'acl|list': _doc('List the current ACL rules in ACL config file format', 'server',
         complexity='O(N). Where N is the number of configured users.'),
    'acl|load': _doc('Reload the ACLs from the configured ACL file', 'server',
         complexity='O(N). Where N is the number of configured users.'),
    'acl|log': _doc('List latest events denied because of ACLs in place', 'server',
         complexity='O(N) with N being the number of entries shown.'),
    'acl|save': _doc('Save the current ACL rules in the configured ACL file', 'server',
         complexity='O(N). Where N is the number of configured users.'),
    'acl|setuser': _doc('Modify or create the rules for a specific ACL user', 'server',
         complexity='O(N). Where N is the number of rules provided.',
         history=(
             ('6.2.0', 'Added Pub/Sub channel patterns.'),
             ('7.0.0', 'Added selectors and key based permissions.'),)),
    'acl|users': _doc('List the username of all the configured ACL rules', 'server',
         complexity='O(N). Where N is the number of configured users.'),
    'acl|whoami': _doc('Return the name of the user associated to the current connection', 'server',
         complexity='O(1)'),
    'auth': _doc('Authenticate to the server', 'connection',
         complexity='O(N) where N is the number of passwords defined for the user',
         history=(
             ('6.0.0', 'Added ACL style (username and password).'),)),
    'backup': _doc('A container for backup management commands.', 'server',
         complexity='Depends on subcommand.'),
    'backup|abort': _doc('Cancel a backup that has not been sealed yet.', 'server', complexity='O(1)'),
    'backup|cleanup': _doc("Remove a sealed backup's files and return to idle.", 'server', complexity='O(1)'),
    'backup|help': _doc('Return helpful text about BACKUP command parameters.', 'server', complexity='O(1)'),
    'backup|list': _doc('List the immutable backup file paths pinned so far.', 'server', complexity='O(1)'),
    'backup|seal': _doc('Freeze the current backup (BASE + INCR + manifest).', 'server', complexity='O(1)'),
    'backup|start': _doc("Start a new backup into the configured 'backupdirname'.", 'server', complexity='O(1)'),
    'backup|status': _doc('Report the current backup state.', 'server', complexity='O(1)'),
    'bgrewriteaof': _doc('Asynchronously rewrite the append-only file', 'server',
         complexity='O(1)'),
    'bgsave': _doc('Asynchronously save the dataset to disk', 'server',
         complexity='O(1)',
         history=(
             ('3.2.2', 'Added the `SCHEDULE` option.'),)),
    'client': _doc('A container for client connection commands', 'connection',
         complexity='Depends on subcommand.'),
    'client|getname': _doc('Get the current connection name', 'connection',
         complexity='O(1)'),
    'client|help': _doc('Show helpful text about the different subcommands', 'connection',
         complexity='O(1)'),
    'client|id': _doc('Returns the client ID for the current connection', 'connection',
         complexity='O(1)'),
    'client|info': _doc('Returns information about the current client connection.', 'connection',
         complexity='O(1)'),
    'client|kill': _doc('Kill the connection of a client', 'connection',
         complexity='O(N) where N is the number of client connections',
         history=(
             ('2.8.12', 'Added new filter format.'),
             ('2.8.12', '`ID` option.'),
             ('3.2.0', 'Added `master` type in for `TYPE` option.'),
             ('5.0.0', 'Replaced `slave` `TYPE` with `replica`. `slave` still supported for backward compatibility.'),
             ('6.2.0', '`LADDR` option.'),)),
    'client|list': _doc('Get the list of client connections', 'connection',
         complexity='O(N) where N is the number of client connections',
         history=(
             ('2.8.12', 'Added unique client `id` field.'),
             ('5.0.0', 'Added optional `TYPE` filter.'),
             ('6.0.0', 'Added `user` field.'),
             ('6.2.0', 'Added `argv-mem`, `tot-mem`, `laddr` and `redir` fields and the optional `ID` filter.'),
             ('7.0.0', 'Added `resp`, `multi-mem`, `rbs` and `rbp` fields.'),
             ('7.0.3', 'Added `ssub` field.'),)),
    'client|no-evict': _doc('Set client eviction mode for the current connection', 'connection',
         complexity='O(1)'),
    'client|no-touch': _doc('Controls whether commands sent by the client affect the LRU/LFU of accessed keys.', 'connection',
         complexity='O(1)'),
    'client|setinfo': _doc('Sets information specific to the client or connection.', 'connection',
         complexity='O(1)'),
    'client|setname': _doc('Set the current connection name', 'connection',
         complexity='O(1)'),
    'client|unblock': _doc('Unblock a client blocked in a blocking command from a different connection', 'connection',
         complexity='O(log N) where N is the number of client connections'),
    'command': _doc('Get array of Redis command details', 'server',
         complexity='O(N) where N is the total number of Redis commands'),
    'config': _doc('A container for server configuration commands', 'server',
         complexity='Depends on subcommand.'),
    'config|get': _doc('Get the values of configuration parameters', 'server',
         complexity='O(N) when N is the number of configuration parameters provided',
         history=(
             ('7.0.0', 'Added the ability to pass multiple pattern parameters in one call'),)),
    'config|help': _doc('Show helpful text about the different subcommands', 'server',
         complexity='O(1)'),
    'config|resetstat': _doc('Reset the stats returned by INFO', 'server',
         complexity='O(1)'),
    'config|rewrite': _doc('Rewrite the configuration file with the in memory configuration', 'server',
         complexity='O(1)'),
    'config|set': _doc('Set configuration parameters to the given values', 'server',
         complexity='O(N) when N is the number of configuration parameters provided',
         history=(
             ('7.0.0', 'Added the ability to set multiple parameters in one call.'),)),
    'copy': _doc('Copy a key', 'generic',
         complexity='O(N) worst case for collections, where N is the number of nested items. O(1) for string values.'),
    'dbsize': _doc('Return the number of keys in the selected database', 'server',
         complexity='O(1)'),
    'debug': _doc('A container for debugging commands', 'server',
         complexity='Depends on subcommand.',
         syscmd=True),
    'decr': _doc('Decrement the integer value of a key by one', 'string',
         complexity='O(1)'),
    'decrby': _doc('Decrement the integer value of a key by the given number', 'string',
         complexity='O(1)'),
    'del': _doc('Delete a key', 'generic',
         complexity='O(N) where N is the number of keys that will be removed. When a key to remove holds a value other than a string, the individual complexity for this key is O(M) where M is the number of elements in the list, set, sorted set or hash. Removing a single key that holds a string value is O(1).'),
    'discard': _doc('Discard all commands issued after MULTI', 'transactions',
         complexity='O(N), when N is the number of queued commands'),
    'dump': _doc('Return a serialized version of the value stored at the specified key.', 'generic',
         complexity='O(1) to access the key and additional O(N*M) to serialize it, where N is the number of Redis objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1).'),
    'echo': _doc('Echo the given string', 'connection',
         complexity='O(1)'),
    'exec': _doc('Execute all commands issued after MULTI', 'transactions',
         complexity='Depends on commands in the transaction'),
    'exists': _doc('Determine if a key exists', 'generic',
         complexity='O(N) where N is the number of keys to check.',
         history=(
             ('3.0.3', 'Accepts multiple `key` arguments.'),)),
    'expire': _doc("Set a key's time to live in seconds", 'generic',
         complexity='O(1)',
         history=(
             ('7.0.0', 'Added options: `NX`, `XX`, `GT` and `LT`.'),)),
    'expireat': _doc('Set the expiration for a key as a UNIX timestamp', 'generic',
         complexity='O(1)',
         history=(
             ('7.0.0', 'Added options: `NX`, `XX`, `GT` and `LT`.'),)),
    'expiretime': _doc('Get the expiration Unix timestamp for a key', 'generic',
         complexity='O(1)'),
    'flushall': _doc('Remove all keys from all databases', 'server',
         complexity='O(N) where N is the total number of keys in all databases',
         history=(
             ('4.0.0', 'Added the `ASYNC` flushing mode modifier.'),
             ('6.2.0', 'Added the `SYNC` flushing mode modifier.'),)),
    'flushdb': _doc('Remove all keys from the current database', 'server',
         complexity='O(N) where N is the number of keys in the selected database',
         history=(
             ('4.0.0', 'Added the `ASYNC` flushing mode modifier.'),
             ('6.2.0', 'Added the `SYNC` flushing mode modifier.'),)),
    'function': _doc('A container for function commands', 'scripting',
         complexity='Depends on subcommand.'),
    'function|flush': _doc('Deleting all functions', 'scripting',
         complexity='O(N) where N is the number of functions deleted'),
    'function|list': _doc('List information about all the functions', 'scripting',
         complexity='O(N) where N is the number of functions'),
    'function|stats': _doc('Return information about the function currently running (name, description, duration)', 'scripting',
         complexity='O(1)'),
    'get': _doc('Get the value of a key', 'string',
         complexity='O(1)'),
    'hello': _doc('Handshake with Redis', 'connection',
         complexity='O(1)',
         history=(
             ('6.2.0', "`protover` made optional; when called without arguments the command reports the current connection's context."),)),
    'incr': _doc('Increment the integer value of a key by one', 'string',
         complexity='O(1)'),
    'incrby': _doc('Increment the integer value of a key by the given amount', 'string',
         complexity='O(1)'),
    'info': _doc('Get information and statistics about the server', 'server',
         complexity='O(1)',
         history=(
             ('7.0.0', 'Added support for taking multiple section arguments.'),)),
    'keys': _doc('Find all keys matching the given pattern', 'generic',
         complexity='O(N) with N being the number of keys in the database, under the assumption that the key names in the database and the given pattern have limited length.'),
    'lastsave': _doc('Get the UNIX time stamp of the last successful save to disk', 'server',
         complexity='O(1)'),
    'latency': _doc('A container for latency diagnostics commands', 'server',
         complexity='Depends on subcommand.'),
    'latency|doctor': _doc('Return a human readable latency analysis report.', 'server',
         complexity='O(1)'),
    'latency|help': _doc('Show helpful text about the different subcommands.', 'server',
         complexity='O(1)'),
    'latency|histogram': _doc('Return the cumulative distribution of latencies of a subset of commands or all.', 'server',
         complexity='O(N) where N is the number of commands with latency information being retrieved.'),
    'latency|history': _doc('Return timestamp-latency samples for the event.', 'server',
         complexity='O(1)'),
    'latency|latest': _doc('Return the latest latency samples for all events.', 'server',
         complexity='O(1)'),
    'latency|reset': _doc('Reset latency data for one or more events.', 'server',
         complexity='O(1)'),
    'memory': _doc('A container for memory diagnostics commands', 'server',
         complexity='Depends on subcommand.'),
    'memory|doctor': _doc('Outputs memory problems report', 'server',
         complexity='O(1)'),
    'memory|help': _doc('Show helpful text about the different subcommands', 'server',
         complexity='O(1)'),
    'memory|malloc-stats': _doc('Show allocator internal stats', 'server',
         complexity='Depends on how much memory is allocated, could be slow'),
    'memory|purge': _doc('Ask the allocator to release memory', 'server',
         complexity='Depends on how much memory is allocated, could be slow'),
    'memory|stats': _doc('Show memory usage details', 'server',
         complexity='O(1)'),
    'memory|usage': _doc('Estimate the memory usage of a key', 'server',
         complexity='O(N) where N is the number of samples.'),
    'mget': _doc('Get the values of all the given keys', 'string',
         complexity='O(N) where N is the number of keys to retrieve.'),
    'monitor': _doc('Listen for all requests received by the server in real time', 'server'),
    'multi': _doc('Mark the start of a transaction block', 'transactions',
         complexity='O(1)'),
    'object': _doc('A container for object introspection commands', 'generic',
         complexity='Depends on subcommand.'),
    'object|encoding': _doc('Inspect the internal encoding of a Redis object', 'generic',
         complexity='O(1)'),
    'object|freq': _doc('Get the logarithmic access frequency counter of a Redis object', 'generic',
         complexity='O(1)'),
    'object|help': _doc('Show helpful text about the different subcommands', 'generic',
         complexity='O(1)'),
    'object|idletime': _doc('Get the time since a Redis object was last accessed', 'generic',
         complexity='O(1)'),
    'object|refcount': _doc('Get the number of references to the value of the key', 'generic',
         complexity='O(1)'),
    'persist': _doc('Remove the expiration from a key', 'generic',
         complexity='O(1)'),
    'migrate': _doc('Atomically transfer a key from a Redis instance to another one.', 'generic',
         complexity='This command actually executes a DUMP+DEL in the source instance, and a RESTORE in the target instance. See the pages of these commands for time complexity. Also an O(N) data transfer between the two instances is performed.',
         history=(
             ('3.0.0', 'Added the `COPY` and `REPLACE` options.'),
             ('3.0.6', 'Added the `KEYS` option.'),
             ('4.0.7', 'Added the `AUTH` option.'),
             ('6.0.0', 'Added the `AUTH2` option.'),)),
    'pexpire': _doc("Set a key's time to live in milliseconds", 'generic',
         complexity='O(1)',
         history=(
             ('7.0.0', 'Added options: `NX`, `XX`, `GT` and `LT`.'),)),
    'pexpireat': _doc('Set the expiration for a key as a UNIX timestamp specified in milliseconds', 'generic',
         complexity='O(1)',
         history=(
             ('7.0.0', 'Added options: `NX`, `XX`, `GT` and `LT`.'),)),
    'pexpiretime': _doc('Get the expiration Unix timestamp for a key in milliseconds', 'generic',
         complexity='O(1)'),
    'ping': _doc('Ping the server', 'connection',
         complexity='O(1)'),
    'psubscribe': _doc('Listen for messages published to channels matching the given patterns', 'pubsub',
         complexity='O(N) where N is the number of patterns the client is already subscribed to.'),
    'psync': _doc('Internal command used for replication', 'server'),
    'pttl': _doc('Get the time to live for a key in milliseconds', 'generic',
         complexity='O(1)',
         history=(
             ('2.8.0', 'Added the -2 reply.'),)),
    'publish': _doc('Post a message to a channel', 'pubsub',
         complexity='O(N+M) where N is the number of clients subscribed to the receiving channel and M is the total number of subscribed patterns (by any client).'),
    'pubsub': _doc('A container for Pub/Sub commands', 'pubsub',
         complexity='Depends on subcommand.'),
    'pubsub|channels': _doc('List active channels', 'pubsub',
         complexity='O(N) where N is the number of active channels, and assuming constant time pattern matching (relatively short channels and patterns)'),
    'pubsub|help': _doc('Show helpful text about the different subcommands', 'pubsub',
         complexity='O(1)'),
    'pubsub|numpat': _doc('Get the count of unique patterns pattern subscriptions', 'pubsub',
         complexity='O(1)'),
    'pubsub|numsub': _doc('Get the count of subscribers for channels', 'pubsub',
         complexity='O(N) for the NUMSUB subcommand, where N is the number of requested channels'),
    'pubsub|shardchannels': _doc('List active shard channels', 'pubsub',
         complexity='O(N) where N is the number of active shard channels, and assuming constant time pattern matching (relatively short shard channels).'),
    'pubsub|shardnumsub': _doc('Get the count of subscribers for shard channels', 'pubsub',
         complexity='O(N) for the SHARDNUMSUB subcommand, where N is the number of requested shard channels'),
    'punsubscribe': _doc('Stop listening for messages posted to channels matching the given patterns', 'pubsub',
         complexity='O(N+M) where N is the number of patterns the client is already subscribed and M is the number of total patterns subscribed in the system (by any client).'),
    'quit': _doc('Close the connection', 'connection',
         complexity='O(1)'),
    'rename': _doc('Rename a key', 'generic',
         complexity='O(1)'),
    'renamenx': _doc('Rename a key, only if the new key does not exist', 'generic',
         complexity='O(1)',
         history=(
             ('3.2.0', 'The command no longer returns an error when source and destination names are the same.'),)),
    'replconf': _doc('An internal command for configuring the replication stream', 'server',
         complexity='O(1)',
         syscmd=True),
    'replicaof': _doc('Make the server a replica of another instance, or promote it as master.', 'server',
         complexity='O(1)'),
    'reset': _doc('Reset the connection', 'connection',
         complexity='O(1)'),
    'restore': _doc('Create a key using the provided serialized value, previously obtained using DUMP.', 'generic',
         complexity='O(1) to create the new key and additional O(N*M) to reconstruct the serialized value, where N is the number of Redis objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1). However for sorted set values the complexity is O(N*M*log(N)) because inserting values into sorted sets is O(log(N)).',
         history=(
             ('3.0.0', 'Added the `REPLACE` modifier.'),
             ('5.0.0', 'Added the `ABSTTL` modifier.'),
             ('5.0.0', 'Added the `IDLETIME` and `FREQ` options.'),)),
    'restore-asking': _doc('An internal command for migrating keys in a cluster', 'server',
         complexity='O(1) to create the new key and additional O(N*M) to reconstruct the serialized value, where N is the number of Redis objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1). However for sorted set values the complexity is O(N*M*log(N)) because inserting values into sorted sets is O(log(N)).',
         history=(
             ('3.0.0', 'Added the `REPLACE` modifier.'),
             ('5.0.0', 'Added the `ABSTTL` modifier.'),
             ('5.0.0', 'Added the `IDLETIME` and `FREQ` options.'),),
         syscmd=True),
    'role': _doc('Return the role of the instance in the context of replication', 'server',
         complexity='O(1)'),
    'save': _doc('Synchronously save the dataset to disk', 'server',
         complexity='O(N) where N is the total number of keys in all databases'),
    'scan': _doc('Incrementally iterate the keys space', 'generic',
         complexity='O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to return back to 0. N is the number of elements inside the collection.',
         history=(
             ('6.0.0', 'Added the `TYPE` subcommand.'),)),
    'script': _doc('A container for Lua scripts management commands', 'scripting',
         complexity='Depends on subcommand.'),
    'script|exists': _doc('Check existence of scripts in the script cache.', 'scripting',
         complexity='O(N) with N being the number of scripts to check (so checking a single script is an O(1) operation).'),
    'script|flush': _doc('Remove all the scripts from the script cache.', 'scripting',
         complexity='O(N) with N being the number of scripts in cache',
         history=(
             ('6.2.0', 'Added the `ASYNC` and `SYNC` flushing mode modifiers.'),)),
    'select': _doc('Change the selected database for the current connection', 'connection',
         complexity='O(1)'),
    'set': _doc('Set the string value of a key', 'string',
         complexity='O(1)',
         history=(
             ('2.6.12', 'Added the `EX`, `PX`, `NX` and `XX` options.'),
             ('6.0.0', 'Added the `KEEPTTL` option.'),
             ('6.2.0', 'Added the `GET`, `EXAT` and `PXAT` option.'),
             ('7.0.0', 'Allowed the `NX` and `GET` options to be used together.'),)),
    'shutdown': _doc('Synchronously save the dataset to disk and then shut down the server', 'server',
         complexity='O(N) when saving, where N is the total number of keys in all databases when saving data, otherwise O(1)',
         history=(
             ('7.0.0', 'Added the `NOW`, `FORCE` and `ABORT` modifiers.'),)),
    'slaveof': _doc('Make the server a replica of another instance, or promote it as master.', 'server',
         complexity='O(1)',
         deprecated=('5.0.0', '`REPLICAOF`')),
    'slowlog': _doc('A container for slow log commands', 'server',
         complexity='Depends on subcommand.'),
    'slowlog|get': _doc("Get the slow log's entries", 'server',
         complexity='O(N) where N is the number of entries returned',
         history=(
             ('4.0.0', 'Added client IP address, port and name to the reply.'),)),
    'slowlog|help': _doc('Show helpful text about the different subcommands', 'server',
         complexity='O(1)'),
    'slowlog|len': _doc("Get the slow log's length", 'server',
         complexity='O(1)'),
    'slowlog|reset': _doc('Clear all entries from the slow log', 'server',
         complexity='O(N) where N is the number of entries in the slowlog'),
    'spublish': _doc('Post a message to a shard channel', 'pubsub',
         complexity='O(N) where N is the number of clients subscribed to the receiving shard channel.'),
    'ssubscribe': _doc('Listen for messages published to the given shard channels', 'pubsub',
         complexity='O(N) where N is the number of shard channels to subscribe to.'),
    'streamdb.backup': _doc("Write a consistent copy of the server's data into a directory, in the background (StreamDB)", 'server',
         complexity='O(N) where N is the size of the data: done by child processes'),
    'subscribe': _doc('Listen for messages published to the given channels', 'pubsub',
         complexity='O(N) where N is the number of channels to subscribe to.'),
    'sunsubscribe': _doc('Stop listening for messages posted to the given shard channels', 'pubsub',
         complexity='O(N) where N is the number of clients already subscribed to a shard channel.'),
    'swapdb': _doc('Swaps two Redis databases', 'server',
         complexity='O(N) where N is the count of clients watching or blocking on keys from both databases.'),
    'sync': _doc('Internal command used for replication', 'server'),
    'time': _doc('Return the current server time', 'server',
         complexity='O(1)'),
    'ttl': _doc('Get the time to live for a key in seconds', 'generic',
         complexity='O(1)',
         history=(
             ('2.8.0', 'Added the -2 reply.'),)),
    'type': _doc('Determine the type stored at key', 'generic',
         complexity='O(1)'),
    'unlink': _doc('Delete a key asynchronously in another thread. Otherwise it is just as DEL, but non blocking.', 'generic',
         complexity='O(1) for each key removed regardless of its size. Then the command does O(N) work in a different thread in order to reclaim memory, where N is the number of allocations the deleted objects where composed of.'),
    'unsubscribe': _doc('Stop listening for messages posted to the given channels', 'pubsub',
         complexity='O(N) where N is the number of clients already subscribed to a channel.'),
    'unwatch': _doc('Forget about all watched keys', 'transactions',
         complexity='O(1)'),
    'wait': _doc('Wait for the synchronous replication of all the write commands sent in the context of the current connection', 'generic',
         complexity='O(1)'),
    'waitaof': _doc('Blocks until all of the preceding write commands sent by the connection are written to the append-only file of the master and/or replicas.', 'generic',
         complexity='O(1)'),
    'watch': _doc('Watch the given keys to determine execution of the MULTI/EXEC block', 'transactions',
         complexity='O(1) for every key.'),
    'xack': _doc('Marks a pending message as correctly processed, effectively removing it from the pending entries list of the consumer group. Return value of the command is the number of messages successfully acknowledged, that is, the IDs we were actually able to resolve in the PEL.', 'stream',
         complexity='O(1) for each message ID processed.'),
    'xackdel': _doc('Acknowledges and conditionally deletes one or multiple entries (messages) for a stream consumer group.', 'stream',
         complexity='O(1) for each entry ID processed.'),
    'xadd': _doc('Appends a new entry to a stream', 'stream',
         complexity='O(1) when adding a new entry, O(N) when trimming where N being the number of entries evicted.',
         history=(
             ('6.2.0', 'Added the `NOMKSTREAM` option, `MINID` trimming strategy and the `LIMIT` option.'),
             ('7.0.0', 'Added support for the `<ms>-*` explicit ID form.'),
             ('8.2.0', 'Added the `KEEPREF`, `DELREF` and `ACKED` options.'),
             ('8.6.0', 'Added the `IDMPAUTO` and `IDMP` options.'),)),
    'xautoclaim': _doc('Changes (or acquires) ownership of messages in a consumer group, as if the messages were delivered to the specified consumer.', 'stream',
         complexity='O(1) if COUNT is small.',
         history=(
             ('7.0.0', 'Added an element to the reply array, containing deleted entries the command cleared from the PEL'),)),
    'xcfgset': _doc('Sets the IDMP configuration parameters of a stream.', 'stream',
         complexity='O(1)'),
    'xclaim': _doc('Changes (or acquires) ownership of a message in a consumer group, as if the message was delivered to the specified consumer.', 'stream',
         complexity='O(log N) with N being the number of messages in the PEL of the consumer group.'),
    'xdel': _doc('Removes the specified entries from the stream. Returns the number of items actually deleted, that may be different from the number of IDs passed in case certain IDs do not exist.', 'stream',
         complexity='O(1) for each single item to delete in the stream, regardless of the stream size.'),
    'xdelex': _doc('Deletes one or multiple entries from the stream, with a policy for their consumer-group references.', 'stream',
         complexity='O(1) for each single item to delete in the stream, regardless of the stream size.'),
    'xgroup': _doc('A container for consumer groups commands', 'stream',
         complexity='Depends on subcommand.'),
    'xgroup|create': _doc('Create a consumer group.', 'stream',
         complexity='O(1)',
         history=(
             ('7.0.0', 'Added the `entries_read` named argument.'),)),
    'xgroup|createconsumer': _doc('Create a consumer in a consumer group.', 'stream',
         complexity='O(1)'),
    'xgroup|delconsumer': _doc('Delete a consumer from a consumer group.', 'stream',
         complexity='O(1)'),
    'xgroup|destroy': _doc('Destroy a consumer group.', 'stream',
         complexity="O(N) where N is the number of entries in the group's pending entries list (PEL)."),
    'xgroup|help': _doc('Show helpful text about the different subcommands', 'stream',
         complexity='O(1)'),
    'xgroup|setid': _doc('Set a consumer group to an arbitrary last delivered ID value.', 'stream',
         complexity='O(1)',
         history=(
             ('7.0.0', 'Added the optional `entries_read` argument.'),)),
    'xidmprecord': _doc('Records the entry an IDMP producer/idempotent ID pair maps to (the form replicas and the AOF get).', 'stream',
         complexity='O(1)'),
    'xinfo': _doc('A container for stream introspection commands', 'stream',
         complexity='Depends on subcommand.'),
    'xinfo|consumers': _doc('List the consumers in a consumer group', 'stream',
         complexity='O(1)',
         history=(
             ('7.2.0', 'Added the `inactive` field, and changed the meaning of `idle`.'),)),
    'xinfo|groups': _doc('List the consumer groups of a stream', 'stream',
         complexity='O(1)',
         history=(
             ('7.0.0', 'Added the `entries-read` and `lag` fields'),)),
    'xinfo|help': _doc('Show helpful text about the different subcommands', 'stream',
         complexity='O(1)'),
    'xinfo|stream': _doc('Get information about a stream', 'stream',
         complexity='O(1)',
         history=(
             ('6.0.0', 'Added the `FULL` modifier.'),
             ('7.0.0', 'Added the `max-deleted-entry-id`, `entries-added`, `recorded-first-entry-id`, `entries-read` and `lag` fields'),
             ('7.2.0', 'Added the `active-time` field, and changed the meaning of `seen-time`.'),
             ('8.6.0', 'Added the `idmp-duration`, `idmp-maxsize`, `pids-tracked`, `iids-tracked`, `iids-added` and `iids-duplicates` fields.'),)),
    'xlen': _doc('Return the number of entries in a stream', 'stream',
         complexity='O(1)'),
    'xpending': _doc('Return information and entries from a stream consumer group pending entries list, that are messages fetched but never acknowledged.', 'stream',
         complexity='O(N) with N being the number of elements returned, so asking for a small fixed number of entries per call is O(1). O(M), where M is the total number of entries scanned when used with the IDLE filter. When the command returns just the summary and the list of consumers is small, it runs in O(1) time; otherwise, an additional O(N) time for iterating every consumer.',
         history=(
             ('6.2.0', 'Added the `IDLE` option and exclusive range intervals.'),)),
    'xrange': _doc('Return a range of elements in a stream, with IDs matching the specified IDs interval', 'stream',
         complexity='O(N) with N being the number of elements being returned. If N is constant (e.g. always asking for the first 10 elements with COUNT), you can consider it O(1).',
         history=(
             ('6.2.0', 'Added exclusive ranges.'),)),
    'xnack': _doc("Releases pending messages back to the group's PEL without acknowledging them, making them available for re-delivery.", 'stream',
         complexity='O(1) for each message ID processed.'),
    'xread': _doc('Return never seen elements in multiple streams, with IDs greater than the ones reported by the caller for each stream. Can block.', 'stream',
         complexity='For each stream mentioned: O(N) with N being the number of elements being returned, it means that XREAD-ing with a fixed COUNT is O(1). Note that when the BLOCK option is used, XADD will pay O(M) time in order to serve the M clients blocked on the stream getting new data.',
         history=(
             ('7.4.0', 'Added the `+` ID, which reads the last entry of each stream.'),
             ('8.10.0', 'Added the `MAXCOUNT` and `MAXSIZE` options.'),)),
    'xreadgroup': _doc('Return new entries from a stream using a consumer group, or access the history of the pending entries for a given consumer. Can block.', 'stream',
         complexity='For each stream mentioned: O(M) with M being the number of elements returned. If M is constant (e.g. always asking for the first 10 elements with COUNT), you can consider it O(1). On the other side when XREADGROUP blocks, XADD will pay the O(N) time in order to serve the N clients blocked on the stream getting new data.',
         history=(
             ('8.4.0', 'Added the `CLAIM` option.'),
             ('8.10.0', 'Added the `MAXCOUNT` and `MAXSIZE` options.'),)),
    'xrevrange': _doc('Return a range of elements in a stream, with IDs matching the specified IDs interval, in reverse order (from greater to smaller IDs) compared to XRANGE', 'stream',
         complexity='O(N) with N being the number of elements returned. If N is constant (e.g. always asking for the first 10 elements with COUNT), you can consider it O(1).',
         history=(
             ('6.2.0', 'Added exclusive ranges.'),)),
    'xsetid': _doc('An internal command for replicating stream values', 'stream',
         complexity='O(1)',
         history=(
             ('7.0.0', 'Added the `entries_added` and `max_deleted_entry_id` arguments.'),)),
    'xtrim': _doc("Trims the stream to (approximately if '~' is passed) a certain size", 'stream',
         complexity='O(N), with N being the number of evicted entries. Constant times are very small however, since entries are organized in macro nodes containing multiple entries that can be released with a single deallocation.',
         history=(
             ('6.2.0', 'Added the `MINID` trimming strategy and the `LIMIT` option.'),
             ('8.2.0', 'Added the `KEEPREF`, `DELREF` and `ACKED` options.'),)),
}


# ---------------------------------------------------------------------------
# Arguments: COMMAND DOCS's "arguments", read from the grammar in each handler's
# docstring (its first line), so that every option a command takes is described
# where its parser is.  Notation: [optional], a|b (one of, no spaces) and
# "x | y" (one of, whole phrases), <a|b>, "x [x ...]" (repeated), UPPER = token.
# ---------------------------------------------------------------------------

_KEY_NAMES = {"key", "newkey", "source", "destination", "dead-letter-key"}
_INTEGER_WORDS = ("count", "milliseconds", "seconds", "timeout", "index", "numids", "offset",
                  "bits", "numreplicas", "increment", "decrement", "cursor", "entries-read",
                  "entries-added", "duration", "maxsize", "min-idle-time", "ms", "s", "frequency",
                  "ttl", "port", "protover", "db", "destination-db", "retrycount", "client-id",
                  "max-deliveries")


class GrammarError(ValueError):
    pass


def _tokenize(text: str) -> list[str]:
    out: list[str] = []
    for word in text.split():
        if "(" in word or ")" in word:
            raise GrammarError(f"prose, not grammar: {text!r}")
        while word[:1] in ("[", "<") and len(word) > 1:
            out.append(word[0])
            word = word[1:]
        tail = []
        while word[-1:] in ("]", ">") and len(word) > 1:
            tail.append(word[-1])
            word = word[:-1]
        out.append(word)
        out += reversed(tail)
    return out


def _is_token(word: str) -> bool:
    return not any(ch.islower() for ch in word)


def _leaf(word: str) -> dict:
    if "|" in word and len(word) > 1:
        return {"name": word.replace("|", "-").lower(), "type": "oneof",
                "arguments": [_leaf(w) for w in word.split("|")]}
    if _is_token(word):
        return {"name": word.lower(), "type": "pure-token", "token": word}
    kind = ("key" if word in _KEY_NAMES else "integer" if word in _INTEGER_WORDS
            else "pattern" if word == "pattern" else
            "unix-time" if word.startswith("unix-time") else "string")
    return {"name": word, "type": kind}


def _parse_seq(toks: list[str], i: int, close: str | None) -> tuple[list[dict], int]:
    """Arguments up to ``close`` (or the end); returns them and the index after it."""
    alternatives: list[list[dict]] = [[]]
    seq = alternatives[0]
    while i < len(toks):
        t = toks[i]
        if t == close:
            i += 1
            break
        if t in ("]", ">"):
            raise GrammarError(f"unbalanced {t}")
        if t == "|":                                  # " | ": one of whole phrases
            seq = []
            alternatives.append(seq)
            i += 1
            continue
        if t in ("[", "<"):
            inner, i = _parse_seq(toks, i + 1, "]" if t == "[" else ">")
            if not inner:
                raise GrammarError("an empty group")
            if inner[-1].get("name") == "...":
                repeated = inner[:-1]
                n = len(repeated)
                if n and [a.get("name") for a in seq[-n:]] == [a.get("name") for a in repeated]:
                    _repeat(seq, n)                   # x [x ...]
                    continue
                arg = _group(repeated)                # [x ...]: none or more
                arg.setdefault("flags", []).append("multiple")
            else:
                arg = _group(inner)
            if t == "[":
                arg.setdefault("flags", []).append("optional")
            seq.append(arg)
            continue
        seq.append({"name": "..."} if t in ("...", "…") else _leaf(t))
        i += 1
    else:
        if close is not None:
            raise GrammarError(f"missing {close}")
    if len(alternatives) > 1:
        alternatives = [_merge_tokens(_fold_repeats(a, False)) for a in alternatives]
        return [{"name": "-".join(a[0]["name"] for a in alternatives if a), "type": "oneof",
                 "arguments": [_group(a) for a in alternatives]}], i
    # "[x ...]": the caller sees the trailing "..." and decides what it repeats
    return _merge_tokens(_fold_repeats(seq, close is not None)), i


def _fold_repeats(seq: list[dict], keep_last: bool) -> list[dict]:
    """``name ...``: the argument before a "..." is multiple."""
    out: list[dict] = []
    for k, arg in enumerate(seq):
        if arg.get("name") != "..." or (keep_last and k == len(seq) - 1):
            out.append(arg)
        elif not out:
            raise GrammarError("a ... that repeats nothing")
        else:
            out[-1].setdefault("flags", []).append("multiple")
    return out


def _group(args: list[dict]) -> dict:
    if len(args) == 1:
        return args[0]
    if not args:
        raise GrammarError("empty group")
    return {"name": args[0]["name"], "type": "block", "arguments": args}


def _repeat(seq: list[dict], n: int) -> None:
    """``x [x ...]``: mark the last ``n`` arguments of ``seq`` (the x) as multiple."""
    if n > 1:
        seq[-n:] = [_group(seq[-n:])]
    seq[-1].setdefault("flags", []).append("multiple")


def _merge_tokens(seq: list[dict]) -> list[dict]:
    """``COUNT count``: a token followed by its value is one argument with a token."""
    out: list[dict] = []
    for arg in seq:
        prev = out[-1] if out else None
        if (prev is not None and prev["type"] == "pure-token" and "flags" not in prev
                and "token" not in arg and "optional" not in arg.get("flags", ())
                and arg.get("type") not in (None, "pure-token", "oneof", "block")):
            out[-1] = {**arg, "token": prev["token"]}
        else:
            out.append(arg)
    return out


def grammar_arguments(grammar: str, words_of_name: int) -> list[dict]:
    """The arguments of a grammar line such as ``XLEN key`` (the first
    ``words_of_name`` words name the command); GrammarError if it is not one."""
    toks = _tokenize(grammar)[words_of_name:]
    args, i = _parse_seq(toks, 0, None)
    if any(a.get("name") == "..." for a in args):
        raise GrammarError("a stray ...")
    return args

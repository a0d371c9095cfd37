"""Redis's COMMAND DOCS argument trees, written down for every command kvd shares with Redis 7.0.

What: for each command and subcommand (by its full name, ``client|kill``) the ``arguments`` that Redis 7.0.15's
COMMAND DOCS lists, in a compact notation below. ``registry.Command.arguments`` reads them; a command without an
entry (kvd's own: KVD.*, and what Redis 7.2 added: WAITAOF, CLIENT NO-TOUCH, CLIENT SETINFO) has its tree
derived from its ``usage`` string instead (``registry._parse_usage``). ``usage`` stays the human syntax that HELP
prints; these trees are what redis-cli's hints and GUI tools read, so they are Redis's, names and all.

Where the facts come from: Redis 7.0.15's command table (the JSON files in its ``src/commands/`` that its
``commands.c`` is generated from), as its COMMAND DOCS reports them; tests/compat/test_command.py compares every
shared command's reply with a live redis-server's. An entry of ``""`` says Redis lists no arguments.

The notation reads like a usage line with the names made explicit; one argument is::

    [TOKEN=]name[:type][(children)][#key-spec][@since][!deprecated-since][...|+...]

- ``name`` is lowercase (``count``), or quoted when it is not a plain word (``'ip:port'``).
- ``TOKEN=`` is the literal word the client sends before the value (``EX=seconds:integer``). An UPPERCASE word
  alone is a pure token named after itself (``NX`` is ``nx``, type pure-token); a pure token named otherwise says
  so (``ALPHA=sorting:pure-token``). A token that is not a plain word is quoted (``''``, MIGRATE's empty key).
- ``:type`` is one of Redis's argument types; left out it is ``key`` when the argument has a key spec (``#0``),
  ``oneof`` for children separated by `` | ``, ``block`` for children in a row, and ``string`` otherwise.
- ``(children)``: a oneof's alternatives (``condition(NX | XX)``) or a block's parts (``block(min max)``).
- ``#n``: the index of the key spec in COMMAND INFO that finds this argument (``key_spec_index``).
- ``@7.0.0``: the version that added the argument; ``!2.8.12``: the version that deprecated it.
- ``...``: it may repeat (flag ``multiple``); ``+...``: it repeats with its token each time (``multiple_token``).
- ``[ ]`` around an argument: it is optional.

Argument ``summary`` and ``display_text`` have no notation: Redis 7.0.15 reports no summary for these commands'
arguments and no display_text at all. Each command's other documentation (since, group, complexity, doc flags,
deprecation) is in its ``@command(...)`` declaration; ``history`` is left out of kvd's COMMAND DOCS.

A new command that Redis has gets an entry here, written from its JSON file in Redis's ``src/commands/``
(``arguments``) in this notation; the compat test then checks it against redis-server. A kvd-only command needs
none: its ``usage`` is enough.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

_ATOM = re.compile(
    r"\s*(?:"
    r"(?P<punct>[\[\]()|])"
    r"|(?:(?P<token>[A-Z][A-Z0-9_-]*|'[^']*')=)?(?P<name>[a-z][a-z0-9_-]*|'[^']*'|[A-Z][A-Z0-9_-]*)"
    r"(?::(?P<type>[a-z-]+))?"
    r"|(?P<mod>\#\d+|[@!]\d+(?:\.\d+)*|\+?\.\.\.)"
    r")"
)
Argument = dict[str, Any]


@cache
def arguments(full_name: str) -> tuple[Argument, ...] | None:
    """Redis's argument tree for ``full_name`` (``get``, ``client|kill``), or None when Redis has no such
    command. Each argument is a dict whose keys come in the order COMMAND DOCS lists them."""
    notation = DOCS.get(full_name)
    if notation is None:
        return None
    return tuple(_read(notation))


def _read(notation: str) -> list[Argument]:
    """The argument list that ``notation`` writes (see the module's docstring), by recursive descent."""
    atoms = list(_ATOM.finditer(notation.strip()))
    assert "".join(m.group(0) for m in atoms).strip() == notation.strip(), notation
    pos = 0

    def sequence(stop: set[str]) -> list[Argument]:
        nonlocal pos
        found: list[Argument] = []
        while pos < len(atoms) and atoms[pos].group("punct") not in stop:
            optional = atoms[pos].group("punct") == "["
            pos += optional
            found.append(one(optional))
            if optional:
                assert atoms[pos].group("punct") == "]", notation
                pos += 1
        return found

    def one(optional: bool) -> Argument:
        nonlocal pos
        head = atoms[pos]
        assert head.group("name"), notation
        pos += 1
        name, token, kind = _unquote(head.group("name")), head.group("token"), head.group("type")
        if token is None and name.isupper():  # a pure token named after itself
            name, token, kind = name.lower(), name, kind or "pure-token"
        children: list[Argument] = []
        if pos < len(atoms) and atoms[pos].group("punct") == "(":
            pos += 1
            children = sequence({"|", ")"})
            alternatives = atoms[pos].group("punct") == "|"
            while atoms[pos].group("punct") == "|":
                pos += 1
                children += sequence({"|", ")"})
            pos += 1  # ")"
            kind = kind or ("oneof" if alternatives else "block")
        mods: dict[str, str] = {}  # "#", "@", "!", "." or "+" -> what follows it
        while pos < len(atoms) and atoms[pos].group("mod"):
            mod = atoms[pos].group("mod")
            mods[mod[0]] = mod[1:]
            pos += 1
        arg: Argument = {"name": name, "type": kind or ("key" if "#" in mods else "string")}
        if "#" in mods:
            arg["key_spec_index"] = int(mods["#"])
        if token is not None:
            arg["token"] = _unquote(token)
        if "@" in mods:
            arg["since"] = mods["@"]
        if "!" in mods:
            arg["deprecated_since"] = mods["!"]
        flags = ["optional"] if optional else []
        if "." in mods:
            flags.append("multiple")
        elif "+" in mods:
            flags += ["multiple", "multiple_token"]
        if flags:
            arg["flags"] = flags
        if children:
            arg["arguments"] = children
        return arg

    found = sequence(set())
    assert pos == len(atoms), notation
    return found


def _unquote(word: str) -> str:
    return word[1:-1] if word.startswith("'") else word


# Full command name -> Redis 7.0.15's COMMAND DOCS arguments, in the notation above.
DOCS: dict[str, str] = {
    "acl": "",
    "acl|cat": "[categoryname]",
    "acl|deluser": "username...",
    "acl|dryrun": "username command [arg...]",
    "acl|genpass": "[bits:integer]",
    "acl|getuser": "username",
    "acl|help": "",
    "acl|list": "",
    "acl|load": "",
    "acl|log": "[operation(count:integer | RESET)]",
    "acl|save": "",
    "acl|setuser": "username [rule...]",
    "acl|users": "",
    "acl|whoami": "",
    "append": "key#0 value",
    "asking": "",
    "auth": "[username@6.0.0] password",
    "bgrewriteaof": "",
    "bgsave": "[SCHEDULE@3.2.2]",
    "bitcount": "key#0 [index(start:integer end:integer [index_unit(BYTE | BIT)@7.0.0])]",
    "bitfield": (
        "key#0 [operation(GET=encoding_offset(encoding offset:integer) | write([OVERFLOW=wrap_sat_fail(WRAP | "
        "SAT | FAIL)] write_operation(SET=encoding_offset_value(encoding offset:integer value:integer) | "
        "INCRBY=encoding_offset_increment(encoding offset:integer increment:integer))))...]"
    ),
    "bitfield_ro": "key#0 [GET=encoding_offset(encoding offset:integer)+...]",
    "bitop": "operation destkey#0 key#1...",
    "bitpos": "key#0 bit:integer [index(start:integer [end_index(end:integer [index_unit(BYTE | BIT)@7.0.0])])]",
    "client": "",
    "client|caching": "mode(YES | NO)",
    "client|getname": "",
    "client|getredir": "",
    "client|help": "",
    "client|id": "",
    "client|info": "",
    "client|kill": (
        "filter('ip:port'!2.8.12 | new-format([ID=client-id:integer@2.8.12] | "
        "[TYPE=normal_master_slave_pubsub(NORMAL | MASTER@3.2.0 | SLAVE | REPLICA@5.0.0 | PUBSUB)@2.8.12] | "
        "[USER=username] | [ADDR='ip:port'] | [LADDR='ip:port'@6.2.0] | [SKIPME='yes/no'])...)"
    ),
    "client|list": (
        "[TYPE=normal_master_replica_pubsub(NORMAL | MASTER | REPLICA | PUBSUB)@5.0.0] "
        "[ID=id(client-id:integer...)@6.2.0]"
    ),
    "client|no-evict": "enabled(ON | OFF)",
    "client|pause": "timeout:integer [mode(WRITE | ALL)@6.2.0]",
    "client|reply": "on_off_skip(ON | OFF | SKIP)",
    "client|setname": "connection-name",
    "client|tracking": (
        "status(ON | OFF) [REDIRECT=client-id:integer] [PREFIX=prefix+...] [BCAST] [OPTIN] [OPTOUT] [NOLOOP]"
    ),
    "client|trackinginfo": "",
    "client|unblock": "client-id:integer [timeout_error(TIMEOUT | ERROR)]",
    "client|unpause": "",
    "cluster": "",
    "cluster|addslots": "slot:integer...",
    "cluster|addslotsrange": "start-slot_end-slot(start-slot:integer end-slot:integer)...",
    "cluster|bumpepoch": "",
    "cluster|count-failure-reports": "node-id",
    "cluster|countkeysinslot": "slot:integer",
    "cluster|delslots": "slot:integer...",
    "cluster|delslotsrange": "start-slot_end-slot(start-slot:integer end-slot:integer)...",
    "cluster|failover": "[options(FORCE | TAKEOVER)]",
    "cluster|flushslots": "",
    "cluster|forget": "node-id",
    "cluster|getkeysinslot": "slot:integer count:integer",
    "cluster|help": "",
    "cluster|info": "",
    "cluster|keyslot": "key",
    "cluster|links": "",
    "cluster|meet": "ip port:integer [cluster_bus_port:integer@4.0.0]",
    "cluster|myid": "",
    "cluster|nodes": "",
    "cluster|replicas": "node-id",
    "cluster|replicate": "node-id",
    "cluster|reset": "[hard_soft(HARD | SOFT)]",
    "cluster|saveconfig": "",
    "cluster|set-config-epoch": "config-epoch:integer",
    "cluster|setslot": "slot:integer subcommand(IMPORTING=node-id | MIGRATING=node-id | NODE=node-id | STABLE)",
    "cluster|shards": "",
    "cluster|slaves": "node-id",
    "cluster|slots": "",
    "command": "",
    "command|count": "",
    "command|docs": "[command-name...]",
    "command|getkeys": "",
    "command|getkeysandflags": "",
    "command|help": "",
    "command|info": "[command-name...]",
    "command|list": "[FILTERBY=filterby(MODULE=module-name | ACLCAT=category | PATTERN=pattern:pattern)]",
    "config": "",
    "config|get": "parameter(parameter)...",
    "config|help": "",
    "config|resetstat": "",
    "config|rewrite": "",
    "config|set": "parameter_value(parameter value)...",
    "copy": "source#0 destination#1 [DB=destination-db:integer] [REPLACE]",
    "dbsize": "",
    "debug": "",
    "decr": "key#0",
    "decrby": "key#0 decrement:integer",
    "del": "key#0...",
    "discard": "",
    "dump": "key#0",
    "echo": "message",
    "exec": "",
    "exists": "key#0...",
    "expire": "key#0 seconds:integer [condition(NX | XX | GT | LT)@7.0.0]",
    "expireat": "key#0 unix-time-seconds:unix-time [condition(NX | XX | GT | LT)@7.0.0]",
    "expiretime": "key#0",
    "failover": "[TO=target(host port:integer [FORCE])] [ABORT] [TIMEOUT=milliseconds:integer]",
    "flushall": "[async(ASYNC@4.0.0 | SYNC@6.2.0)]",
    "flushdb": "[async(ASYNC@4.0.0 | SYNC@6.2.0)]",
    "get": "key#0",
    "getbit": "key#0 offset:integer",
    "getdel": "key#0",
    "getex": (
        "key#0 [expiration(EX=seconds:integer | PX=milliseconds:integer | EXAT=unix-time-seconds:unix-time | "
        "PXAT=unix-time-milliseconds:unix-time | PERSIST)]"
    ),
    "getrange": "key#0 start:integer end:integer",
    "getset": "key#0 value",
    "hello": "[arguments(protover:integer [AUTH=username_password(username password)] [SETNAME=clientname])]",
    "incr": "key#0",
    "incrby": "key#0 increment:integer",
    "incrbyfloat": "key#0 increment:double",
    "info": "[section...]",
    "keys": "pattern:pattern",
    "lastsave": "",
    "latency": "",
    "latency|doctor": "",
    "latency|graph": "event",
    "latency|help": "",
    "latency|histogram": "[command...]",
    "latency|history": "event",
    "latency|latest": "",
    "latency|reset": "[event...]",
    "lcs": "key1#0 key2#0 [LEN] [IDX] [MINMATCHLEN=len:integer] [WITHMATCHLEN]",
    "lolwut": "[VERSION=version:integer]",
    "memory": "",
    "memory|doctor": "",
    "memory|help": "",
    "memory|malloc-stats": "",
    "memory|purge": "",
    "memory|stats": "",
    "memory|usage": "key#0 [SAMPLES=count:integer]",
    "mget": "key#0...",
    "migrate": (
        "host port:integer key_or_empty_string(key#0 | ''=empty_string:pure-token) destination-db:integer "
        "timeout:integer [COPY@3.0.0] [REPLACE@3.0.0] [authentication([AUTH=password@4.0.7] | "
        "[AUTH2=username_password(username password)@6.0.0])] [KEYS=key#1@3.0.6...]"
    ),
    "module": "",
    "module|help": "",
    "module|list": "",
    "module|load": "path [arg...]",
    "module|loadex": "path [CONFIG=configs(name value)+...] [ARGS=args(arg)...]",
    "module|unload": "name",
    "monitor": "",
    "move": "key#0 db:integer",
    "mset": "key_value(key#0 value)...",
    "msetnx": "key_value(key#0 value)...",
    "multi": "",
    "object": "",
    "object|encoding": "key#0",
    "object|freq": "key#0",
    "object|help": "",
    "object|idletime": "key#0",
    "object|refcount": "key#0",
    "persist": "key#0",
    "pexpire": "key#0 milliseconds:integer [condition(NX | XX | GT | LT)@7.0.0]",
    "pexpireat": "key#0 unix-time-milliseconds:unix-time [condition(NX | XX | GT | LT)@7.0.0]",
    "pexpiretime": "key#0",
    "pfadd": "key#0 [element...]",
    "pfcount": "key#0...",
    "pfdebug": "subcommand key#0",
    "pfmerge": "destkey#0 sourcekey#1...",
    "pfselftest": "",
    "ping": "[message]",
    "psetex": "key#0 milliseconds:integer value",
    "psubscribe": "pattern(pattern:pattern)...",
    "psync": "replicationid offset:integer",
    "pttl": "key#0",
    "publish": "channel message",
    "pubsub": "",
    "pubsub|channels": "[pattern:pattern]",
    "pubsub|help": "",
    "pubsub|numpat": "",
    "pubsub|numsub": "[channel...]",
    "pubsub|shardchannels": "[pattern:pattern]",
    "pubsub|shardnumsub": "[shardchannel...]",
    "punsubscribe": "[pattern:pattern...]",
    "quit": "",
    "randomkey": "",
    "readonly": "",
    "readwrite": "",
    "rename": "key#0 newkey#1",
    "renamenx": "key#0 newkey#1",
    "replconf": "",
    "replicaof": "args(host-port(host port:integer) | no-one(NO ONE))",
    "reset": "",
    "restore": (
        "key#0 ttl:integer serialized-value [REPLACE@3.0.0] [ABSTTL@5.0.0] [IDLETIME=seconds:integer@5.0.0] "
        "[FREQ=frequency:integer@5.0.0]"
    ),
    "restore-asking": (
        "key#0 ttl:integer serialized-value [REPLACE@3.0.0] [ABSTTL@5.0.0] [IDLETIME=seconds:integer@5.0.0] "
        "[FREQ=frequency:integer@5.0.0]"
    ),
    "role": "",
    "save": "",
    "scan": "cursor:integer [MATCH=pattern:pattern] [COUNT=count:integer] [TYPE=type@6.0.0]",
    "select": "index:integer",
    "set": (
        "key#0 value [condition(NX | XX)@2.6.12] [GET@6.2.0] [expiration(EX=seconds:integer@2.6.12 | "
        "PX=milliseconds:integer@2.6.12 | EXAT=unix-time-seconds:unix-time@6.2.0 | "
        "PXAT=unix-time-milliseconds:unix-time@6.2.0 | KEEPTTL@6.0.0)]"
    ),
    "setbit": "key#0 offset:integer value:integer",
    "setex": "key#0 seconds:integer value",
    "setnx": "key#0 value",
    "setrange": "key#0 offset:integer value",
    "shutdown": "[nosave_save(NOSAVE | SAVE)] [NOW@7.0.0] [FORCE@7.0.0] [ABORT@7.0.0]",
    "slaveof": "args(host-port(host port:integer) | no-one(NO ONE))",
    "slowlog": "",
    "slowlog|get": "[count:integer]",
    "slowlog|help": "",
    "slowlog|len": "",
    "slowlog|reset": "",
    "sort": (
        "key#0 [BY=pattern:pattern#1] [LIMIT=offset_count(offset:integer count:integer)] "
        "[GET=pattern:pattern#1+...] [order(ASC | DESC)] [ALPHA=sorting:pure-token] [STORE=destination#2]"
    ),
    "sort_ro": (
        "key#0 [BY=pattern:pattern#1] [LIMIT=offset_count(offset:integer count:integer)] "
        "[GET=pattern:pattern#1+...] [order(ASC | DESC)] [ALPHA=sorting:pure-token]"
    ),
    "spublish": "shardchannel message",
    "ssubscribe": "shardchannel...",
    "strlen": "key#0",
    "subscribe": "channel...",
    "substr": "key#0 start:integer end:integer",
    "sunsubscribe": "[shardchannel...]",
    "swapdb": "index1:integer index2:integer",
    "sync": "",
    "time": "",
    "touch": "key#0...",
    "ttl": "key#0",
    "type": "key#0",
    "unlink": "key#0...",
    "unsubscribe": "[channel...]",
    "unwatch": "",
    "wait": "numreplicas:integer timeout:integer",
    "watch": "key#0...",
}

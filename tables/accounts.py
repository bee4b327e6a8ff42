"""Users, roles and privileges as Doris has them, in the server's own store (SQLite beside the transactions).

Doris's account model, reduced to what a loading service needs:

    identity    'user'@'host'; the host is a pattern (`%` any run of characters, `_` one character), so
                'loader'@'%' logs in from anywhere and 'loader'@'10.0.0.%' only from that subnet
    password    stored as MySQL's native password hash (`*` + hex SHA1(SHA1(password))), the form
                `mysql_native_password` logins check against and `SHOW GRANTS` prints
    privileges  NODE_PRIV, ADMIN_PRIV, GRANT_PRIV, SELECT_PRIV, LOAD_PRIV, ALTER_PRIV, CREATE_PRIV,
                DROP_PRIV, USAGE_PRIV, granted on a scope: `*.*` (global), `db.*` (a database), `db.tbl`
                (a table); ADMIN_PRIV and NODE_PRIV only on `*.*`
    roles       named sets of grants; a user holds its own grants and those of its roles
    built-ins   root ('root'@'%', role `operator`: every privilege) and admin ('admin'@'%', role `admin`:
                every privilege but NODE_PRIV); both get `SL_ROOT_PASSWORD` once, at the first start (Doris
                creates admin with an empty password; here an exposed server never has an empty one)

A check asks for one privilege on a database or a table; ADMIN_PRIV (and NODE_PRIV) satisfy every check, a
grant on `db.*` covers every table of the database, a grant on `*.*` every database. A database is visible
(SHOW DATABASES, `USE`) to a user with a privilege of Doris's SHOW predicate (any but GRANT_PRIV and USAGE_PRIV)
on it or on one of its tables, as in Doris.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from tables.errors import AccessDenied, AlreadyExists, DorisError, NotAuthorized
from tables.store import ACCOUNTS_VERSION, GRANTS, LOGIN_FAILURES, ROLES, USER_ROLES, USERS, Store, Tx

ROOT = "root"
ADMIN = "admin"
OPERATOR_ROLE = "operator"
ADMIN_ROLE = "admin"
ANY_HOST = "%"


class Priv(enum.Flag):
    NODE = enum.auto()
    ADMIN = enum.auto()
    GRANT = enum.auto()
    SELECT = enum.auto()
    LOAD = enum.auto()
    ALTER = enum.auto()
    CREATE = enum.auto()
    DROP = enum.auto()
    USAGE = enum.auto()

    @property
    def doris_name(self) -> str:
        """`SELECT_PRIV`, or `Select_priv,Load_priv` for several (as SHOW GRANTS prints them)."""
        names = [f"{str(p.name).capitalize()}_priv" for p in Priv if p in self]
        return ",".join(names)


NONE = Priv(0)
ALL_PRIVS = reduce(lambda a, b: a | b, Priv)
DATA_PRIVS = Priv.SELECT | Priv.LOAD | Priv.ALTER | Priv.CREATE | Priv.DROP  # what `ALL` grants on a db or table
GLOBAL_ONLY = Priv.ADMIN | Priv.NODE
SUPER = Priv.ADMIN | Priv.NODE  # either satisfies every check
# Doris's `PrivPredicate.SHOW`: the privileges that let a user see a database or table (NODE_PRIV and ADMIN_PRIV
# satisfy every check here)
SHOW = SUPER | Priv.SELECT | Priv.LOAD | Priv.ALTER | Priv.CREATE | Priv.DROP
BUILTIN_ROLES = {OPERATOR_ROLE: ALL_PRIVS, ADMIN_ROLE: ALL_PRIVS & ~Priv.NODE}

_BY_NAME = {f"{p.name}_PRIV": p for p in Priv} | {str(p.name): p for p in Priv}


USER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,63}")  # Doris's FeNameFormat user name, at most 64 characters
MAX_HOST = 255


def check_identity(identity: Identity) -> Identity:
    """Raises: DorisError for a user name Doris refuses or a host pattern longer than a host name can be."""
    if not USER_NAME.fullmatch(identity.user):
        raise DorisError(f"Incorrect user name: '{identity.user}'")
    if not identity.host or len(identity.host) > MAX_HOST:
        raise DorisError(f"Incorrect host: '{identity.host[:MAX_HOST]}'")
    return identity


def parse_privileges(names: Iterable[str]) -> Priv:
    """`SELECT_PRIV, LOAD_PRIV` (any case; `ALL` / `ALL PRIVILEGES` for every data privilege) as a flag set.

    Raises:
        DorisError: a name Doris does not know, in Doris's words.
    """
    privs = NONE
    for raw in names:
        name = " ".join(raw.upper().split())
        if name in ("ALL", "ALL PRIVILEGES"):
            privs |= DATA_PRIVS
        elif name in _BY_NAME:
            privs |= _BY_NAME[name]
        else:
            raise DorisError(f"Unknown privilege type {raw}")
    return privs


def native_password_hash(password: str) -> str:
    """MySQL's `PASSWORD()`: `*` + upper hex SHA1(SHA1(password)); the empty password has the empty hash."""
    if not password:
        return ""
    return "*" + hashlib.sha1(hashlib.sha1(password.encode()).digest()).hexdigest().upper()


def password_matches(stored_hash: str, given: str) -> bool:
    """A clear password (HTTP Basic) against a stored native hash, in constant time."""
    return hmac.compare_digest(native_password_hash(given).encode(), stored_hash.encode())


@dataclass(frozen=True, order=True)
class Identity:
    user: str
    host: str = ANY_HOST

    def __str__(self) -> str:
        return f"'{self.user}'@'{self.host}'"

    def host_matches(self, client: str) -> bool:
        """The identity's host pattern against a client address (`%` and `_` as in SQL LIKE)."""
        return self.host == ANY_HOST or like(self.host.lower(), client.lower())


def like(pattern: str, text: str) -> bool:
    """SQL LIKE without escapes (`%` any run, `_` one character), in O(len(pattern) * len(text)) whatever the
    pattern: a regular expression of many `%` backtracks exponentially, and patterns come from users."""
    p = t = 0
    star, mark = -1, 0
    while t < len(text):
        if p < len(pattern) and pattern[p] in ("_", text[t]):
            p, t = p + 1, t + 1
        elif p < len(pattern) and pattern[p] == "%":
            star, mark, p = p, t, p + 1
        elif star >= 0:
            p, mark = star + 1, mark + 1
            t = mark
        else:
            return False
    return all(c == "%" for c in pattern[p:])


@dataclass(frozen=True)
class Scope:
    """`*.*`, `db.*` or `db.tbl`; `*` is every database or every table of one."""

    db: str = "*"
    table: str = "*"

    def __str__(self) -> str:
        return f"{self.db}.{self.table}"

    @property
    def is_global(self) -> bool:
        return self.db == "*"

    def covers(self, db: str | None, table: str | None) -> bool:
        """True when a grant on this scope applies to `db.table` (None: the database itself, or anything)."""
        if self.is_global:
            return True
        if db is None or self.db != db:
            return False
        return self.table == "*" or (table is not None and self.table == table)


def parse_scope(text: str) -> Scope:
    """`*.*`, `db.*`, `db.tbl`, `internal.db.tbl` (the internal catalog's name is accepted and dropped).

    Raises:
        DorisError: not one of those forms.
    """
    parts = [p.strip().strip("`") for p in text.split(".")]
    if len(parts) == 3 and parts[0].lower() in ("internal", "*"):
        parts = parts[1:]
    if len(parts) != 2 or not all(parts) or (parts[0] == "*" and parts[1] != "*"):
        raise DorisError(f"Invalid privilege level: {text}")
    return Scope(parts[0], parts[1])


@dataclass(frozen=True)
class Grant:
    scope: Scope
    privs: Priv


@dataclass(frozen=True)
class Privileges:
    """What one user may do: its own grants and its roles' grants, resolved once per check."""

    identity: Identity
    grants: tuple[Grant, ...] = ()
    roles: tuple[str, ...] = ()

    @property
    def is_super(self) -> bool:
        return any(g.scope.is_global and g.privs & SUPER for g in self.grants)

    def on(self, db: str | None, table: str | None = None) -> Priv:
        """Every privilege that applies to `db.table` (or to the database, or globally)."""
        return reduce(lambda a, g: a | g.privs if g.scope.covers(db, table) else a, self.grants, NONE)

    def allows(self, wanted: Priv, db: str | None = None, table: str | None = None) -> bool:
        """True when the user holds one of `wanted` on the scope (ADMIN_PRIV / NODE_PRIV hold everything)."""
        held = self.on(db, table)
        return bool(held & (wanted | SUPER))

    def sees_db(self, db: str) -> bool:
        """Doris shows a database to a user with a privilege of its SHOW predicate on it or on one of its tables
        (GRANT_PRIV and USAGE_PRIV show nothing)."""
        return self.is_super or any(g.privs & SHOW and (g.scope.is_global or g.scope.db == db) for g in self.grants)

    def sees_table(self, db: str, table: str) -> bool:
        return self.is_super or bool(self.on(db, table) & SHOW)

    def holds_in(self, wanted: Priv, db: str) -> bool:
        """`wanted` on the database or on one of its tables (or everywhere)."""
        return self.is_super or any(
            g.privs & wanted == wanted and (g.scope.is_global or g.scope.db == db) for g in self.grants
        )


def table_denied(command: str, identity: Identity, db: str, table: str) -> AccessDenied:
    """Doris's ERR_TABLEACCESS_DENIED_ERROR (1142)."""
    return AccessDenied(
        f"{command} command denied to user '{identity.user}'@'{identity.host}' for table '{db}.{table}'"
    )


def db_denied(identity: Identity, db: str) -> AccessDenied:
    """Doris's ERR_DBACCESS_DENIED_ERROR (1044); Doris names the user without its host here."""
    return AccessDenied(f"Access denied for user '{identity.user}' to database '{db}'")


def specific_denied(privs: str) -> AccessDenied:
    """Doris's ERR_SPECIFIC_ACCESS_DENIED_ERROR (1227), e.g. for ADMIN statements."""
    return AccessDenied(f"Access denied; you need (at least one of) the {privs} privilege(s) for this operation")


def login_denied(user: str, used_password: bool) -> NotAuthorized:
    """Doris's ERR_ACCESS_DENIED_ERROR (1045)."""
    return NotAuthorized(f"Access denied for user '{user}' (using password: {'YES' if used_password else 'NO'})")


_TABLES = (USERS, ROLES, USER_ROLES, GRANTS, ACCOUNTS_VERSION)


def _bp(name: str, kind: Any = sa.Text) -> Any:
    return sa.bindparam(name, type_=kind)


MAX_CACHED_LOGINS = 10_000


@dataclass(frozen=True)
class _Login:
    """A successful login as `AccountStore.login` read it: at which accounts version, with which password (a
    salted digest: no clear password is kept), and the privileges it found."""

    version: int
    digest: bytes
    privileges: Privileges


# How long an HTTP login may take the accounts' version it read before (`AccountStore.version`). Read per
# request, that one row was a store statement on the event loop for every load: under 16 concurrent clients, its
# wait for the connection and the GIL handoffs around it cost ~0.2 ms of the server's CPU a load. A change made
# through this server forgets it at once; one made on another server sharing the store counts here within this
# time, as a Doris follower FE applies a master's GRANT once it has replayed its edit log.
VERSION_FRESH_S = 0.05


@dataclass
class AccountStore:
    """The accounts, roles and grants, in a `Store` (or a SQLite file at the path given). A write is one
    transaction; on PostgreSQL every account write takes one lock, so servers sharing the database change
    accounts one at a time (a check-then-insert cannot race another server's)."""

    path: Path | Store
    throttle: LoginThrottle = field(default_factory=lambda: LoginThrottle())

    def __post_init__(self) -> None:
        self.store = Store.of(self.path)
        self._owns_store = not isinstance(self.path, Store)
        self.store.ensure(*_TABLES)
        sql = self.store.sql
        u, r, ur, g = USERS.c, ROLES.c, USER_ROLES.c, GRANTS.c
        v = ACCOUNTS_VERSION.c
        self._version_get = sql("accounts version", lambda: sa.select(v.version).where(v.id == 1))
        self._version_bump = sql(
            "accounts version bump", lambda: sa.update(ACCOUNTS_VERSION).where(v.id == 1).values(version=v.version + 1)
        )
        self._version_add = sql("accounts version add", lambda: sa.insert(ACCOUNTS_VERSION).values(id=1, version=1))
        self._logins: dict[tuple[str, str], _Login] = {}
        self._logins_lock = threading.Lock()
        self._version_seen: tuple[int, float] | None = None  # (accounts version, `time.monotonic()` it was read)
        self._writes = 0  # account writes so far: a version read that one overtook is not kept
        self._salt = os.urandom(16)
        self._role_row = sql("roles get", lambda: sa.select(r.name).where(r.name == _bp("p_name")))
        self._role_add = sql(
            "roles add", lambda: sa.insert(ROLES).values(name=_bp("p_name"), created=_bp("p_now", sa.Float))
        )
        self._user_row_sql = sql(
            "users get", lambda: sa.select(u.password).where(u.name == _bp("p_name"), u.host == _bp("p_host"))
        )
        self._user_add = sql(
            "users add",
            lambda: sa.insert(USERS).values(
                name=_bp("p_name"), host=_bp("p_host"), password=_bp("p_password"), created=_bp("p_now", sa.Float)
            ),
        )
        self._user_password = sql(
            "users password",
            lambda: (
                sa.update(USERS)
                .where(u.name == _bp("p_name"), u.host == _bp("p_host"))
                .values(password=_bp("p_password"))
            ),
        )
        self._user_del = sql(
            "users del", lambda: sa.delete(USERS).where(u.name == _bp("p_name"), u.host == _bp("p_host"))
        )
        self._users = sql("users all", lambda: sa.select(u.name, u.host).order_by(u.name, u.host))
        self._hosts = sql("users hosts", lambda: sa.select(u.host).where(u.name == _bp("p_name")))
        self._member_add = sql(
            "user_roles add",
            lambda: (
                self.store.insert(USER_ROLES)
                .values(name=_bp("p_name"), host=_bp("p_host"), role=_bp("p_role"))
                .on_conflict_do_nothing()
            ),
        )
        self._member_del = sql(
            "user_roles del",
            lambda: sa.delete(USER_ROLES).where(
                ur.name == _bp("p_name"), ur.host == _bp("p_host"), ur.role == _bp("p_role")
            ),
        )
        self._members_del_user = sql(
            "user_roles del user",
            lambda: sa.delete(USER_ROLES).where(ur.name == _bp("p_name"), ur.host == _bp("p_host")),
        )
        self._members_del_role = sql(
            "user_roles del role", lambda: sa.delete(USER_ROLES).where(ur.role == _bp("p_role"))
        )
        self._roles_of = sql(
            "user_roles of",
            lambda: sa.select(ur.role).where(ur.name == _bp("p_name"), ur.host == _bp("p_host")).order_by(ur.role),
        )
        self._roles = sql("roles all", lambda: sa.select(r.name).order_by(r.name))
        self._role_del = sql("roles del", lambda: sa.delete(ROLES).where(r.name == _bp("p_name")))
        self._grants_of = sql(
            "grants of",
            lambda: (
                sa.select(g.db, g.tbl, g.privs)
                .where(g.grantee == _bp("p_grantee"), g.is_role == _bp("p_is_role", sa.Integer))
                .order_by(g.db, g.tbl)
            ),
        )
        self._grants_del = sql(
            "grants del",
            lambda: sa.delete(GRANTS).where(g.grantee == _bp("p_grantee"), g.is_role == _bp("p_is_role", sa.Integer)),
        )

        def scope() -> sa.ColumnElement[bool]:
            return sa.and_(
                g.grantee == _bp("p_grantee"),
                g.is_role == _bp("p_is_role", sa.Integer),
                g.db == _bp("p_db"),
                g.tbl == _bp("p_tbl"),
            )

        self._grant_get = sql("grants get", lambda: sa.select(g.privs).where(scope()))
        self._grant_del = sql("grants del one", lambda: sa.delete(GRANTS).where(scope()))
        self._grant_put = sql(
            "grants put",
            lambda: (
                self.store.insert(GRANTS)
                .values(
                    grantee=_bp("p_grantee"),
                    is_role=_bp("p_is_role", sa.Integer),
                    db=_bp("p_db"),
                    tbl=_bp("p_tbl"),
                    privs=_bp("p_privs", sa.Integer),
                )
                .on_conflict_do_update(
                    index_elements=[g.grantee, g.is_role, g.db, g.tbl], set_={"privs": _bp("p_privs", sa.Integer)}
                )
            ),
        )

    def close(self) -> None:
        if self._owns_store:
            self.store.close()

    def bootstrap(self, root_password: str) -> None:
        """The built-in roles and users, created at the first start: their password comes from the settings then
        (or later, while it is still empty), and a `SET PASSWORD` is kept across restarts."""
        with self._tx() as tx:
            for role, privs in BUILTIN_ROLES.items():
                if tx.run(self._role_row, p_name=role).first() is None:
                    tx.run(self._role_add, p_name=role, p_now=time.time())
                    self._put_grant(tx, role, True, Scope(), privs)
            for user, role, password in ((ROOT, OPERATOR_ROLE, root_password), (ADMIN, ADMIN_ROLE, root_password)):
                identity = Identity(user)
                row = self._user_row(tx, identity)
                if row is None:
                    self._insert_user(tx, identity, native_password_hash(password))
                    tx.run(self._member_add, p_name=user, p_host=ANY_HOST, p_role=role)
                elif not row[0] and password:  # still empty: a server that now has a password never keeps none
                    tx.run(self._user_password, p_name=user, p_host=ANY_HOST, p_password=native_password_hash(password))

    # users

    def create_user(self, identity: Identity, password_hash: str, *, if_not_exists: bool = False) -> None:
        """Raises: DorisError for a name of the built-in users (at any host: a `'root'@'127.0.0.1'` would be the
        identity root's logins from there take, with none of root's privileges), or an existing user."""
        if identity.user in (ROOT, ADMIN):
            raise DorisError(f"Can not create {identity.user} user")
        with self._tx() as tx:
            if self._user_row(tx, identity) is not None:
                if if_not_exists:
                    return
                raise AlreadyExists(f"Operation CREATE USER failed for {identity} : user already exists")
            self._insert_user(tx, identity, password_hash)

    def drop_user(self, identity: Identity, *, if_exists: bool = False) -> None:
        # the built-in users; another host's `root` or `admin` (which older releases let GRANT_PRIV create, and
        # which shadowed root's logins from that host) can be dropped
        if identity in (Identity(ROOT), Identity(ADMIN)):
            raise DorisError(f"Can not drop user {identity.user}")
        with self._tx() as tx:
            if self._user_row(tx, identity) is None:
                if if_exists:
                    return
                raise DorisError(f"Operation DROP USER failed for {identity} : user not exists")
            tx.run(self._user_del, p_name=identity.user, p_host=identity.host)
            tx.run(self._members_del_user, p_name=identity.user, p_host=identity.host)
            tx.run(self._grants_del, p_grantee=str(identity), p_is_role=0)

    def set_password(self, identity: Identity, password_hash: str) -> None:
        with self._tx() as tx:
            if self._user_row(tx, identity) is None:
                raise DorisError(f"user {identity} does not exist")
            tx.run(self._user_password, p_name=identity.user, p_host=identity.host, p_password=password_hash)

    def users(self) -> list[Identity]:
        with self.store.read() as tx:
            return [Identity(n, h) for n, h in tx.run(self._users).rows]

    def match(self, user: str, client: str) -> Identity | None:
        """The identity a login as `user` from `client` takes: the most specific matching host, as MySQL picks
        (a literal host before a pattern, `%` last)."""
        with self.store.read() as tx:
            rows = tx.run(self._hosts, p_name=user).rows
        candidates = [Identity(user, host) for (host,) in rows if Identity(user, host).host_matches(client)]
        candidates.sort(key=lambda i: (i.host == ANY_HOST, "%" in i.host or "_" in i.host, -len(i.host)))
        return candidates[0] if candidates else None

    def password_hash(self, identity: Identity) -> str | None:
        with self.store.read() as tx:
            row = self._user_row(tx, identity)
        return None if row is None else str(row[0])

    def authenticate(self, user: str, password: str, client: str) -> Identity:
        """A clear-text login (HTTP Basic). Unknown users and wrong passwords get the same refusal.

        Raises:
            DorisError: Doris's `Access denied for user ...` text.
        """
        self.throttle.check(user, client)
        identity = self.match(user, client)
        stored = self.password_hash(identity) if identity is not None else None
        if identity is None or stored is None or not password_matches(stored, password):
            self.throttle.failed(client)
            raise login_denied(user, bool(password))
        self.throttle.succeeded(client)
        return identity

    # roles

    def create_role(self, role: str, *, if_not_exists: bool = False) -> None:
        with self._tx() as tx:
            if tx.run(self._role_row, p_name=role).first() is not None:
                if if_not_exists:
                    return
                raise AlreadyExists(f"Role {role} already exists")
            tx.run(self._role_add, p_name=role, p_now=time.time())

    def drop_role(self, role: str, *, if_exists: bool = False) -> None:
        if role in BUILTIN_ROLES:
            raise DorisError(f"Can not drop role {role}")
        with self._tx() as tx:
            if tx.run(self._role_row, p_name=role).first() is None:
                if if_exists:
                    return
                raise DorisError(f"Role {role} does not exist")
            tx.run(self._role_del, p_name=role)
            tx.run(self._members_del_role, p_role=role)
            tx.run(self._grants_del, p_grantee=role, p_is_role=1)

    def roles(self) -> list[str]:
        with self.store.read() as tx:
            return [name for (name,) in tx.run(self._roles).rows]

    def grant_role(self, role: str, identity: Identity) -> None:
        """Raises: DorisError for `operator` (root's role, as Doris refuses it), an unknown role or user."""
        if role == OPERATOR_ROLE:
            raise DorisError(f"Can not grant role: {role}")
        with self._tx() as tx:
            self._require_role(tx, role)
            self._require_user(tx, identity)
            tx.run(self._member_add, p_name=identity.user, p_host=identity.host, p_role=role)

    def revoke_role(self, role: str, identity: Identity) -> None:
        """Raises: DorisError for `operator`, an unknown role or user."""
        if role == OPERATOR_ROLE:
            raise DorisError(f"Can not revoke role: {role}")
        with self._tx() as tx:
            self._require_role(tx, role)
            self._require_user(tx, identity)
            tx.run(self._member_del, p_name=identity.user, p_host=identity.host, p_role=role)

    # grants

    def grant(self, privs: Priv, scope: Scope, *, user: Identity | None = None, role: str | None = None) -> None:
        """GRANT privs ON scope TO user | ROLE role (privileges add up).

        Raises:
            DorisError: ADMIN_PRIV / NODE_PRIV below `*.*`, or an unknown user or role.
        """
        self._check_level(privs, scope)
        if role in BUILTIN_ROLES:
            raise DorisError(f"Can not grant to role: {role}")
        grantee, is_role = self._grantee(user, role)
        with self._tx() as tx:
            self._require_grantee(tx, user, role)
            held = self._held(tx, grantee, is_role, scope)
            self._put_grant(tx, grantee, is_role, scope, held | privs)

    def revoke(self, privs: Priv, scope: Scope, *, user: Identity | None = None, role: str | None = None) -> None:
        """Raises: as `grant` (the built-in roles keep their privileges: root and admin hold theirs through them)."""
        self._check_level(privs, scope)
        if role in BUILTIN_ROLES:
            raise DorisError(f"Can not revoke from role: {role}")
        grantee, is_role = self._grantee(user, role)
        with self._tx() as tx:
            self._require_grantee(tx, user, role)
            remaining = self._held(tx, grantee, is_role, scope) & ~privs
            self._put_grant(tx, grantee, is_role, scope, remaining)

    def login(self, user: str, password: str, client: str) -> Privileges:
        """`authenticate`, then the identity's `privileges`: what a request runs with.

        A login takes the accounts' version (`version`) and, when no account, role or grant changed since this
        user last logged in from this client with this password, takes what that login read: most requests cost
        no store statement. Any change bumps the version: made through this server, it counts on the next request;
        made on another server sharing the store, within `VERSION_FRESH_S`.

        Raises:
            DorisError: Doris's `Access denied for user ...` text.
        """
        self.throttle.check(user, client)
        version = self.version()
        digest = hashlib.sha256(self._salt + password.encode()).digest()
        key = (user, client)
        cached = self._logins.get(key)
        if cached is not None and cached.version == version and hmac.compare_digest(cached.digest, digest):
            self.throttle.succeeded(client)
            return cached.privileges
        privileges = self.privileges(self.authenticate(user, password, client))
        with self._logins_lock:
            if len(self._logins) >= MAX_CACHED_LOGINS:
                self._logins.clear()
            self._logins[key] = _Login(version, digest, privileges)
        return privileges

    def version(self) -> int:
        """The accounts' version (one indexed row, which every account, role or grant change bumps), as read at
        most `VERSION_FRESH_S` ago, or after this server's last account write (which forgets it)."""
        now = time.monotonic()
        seen = self._version_seen
        if seen is not None and now - seen[1] < VERSION_FRESH_S:
            return seen[0]
        writes = self._writes
        with self.store.read() as tx:
            version = int(tx.run(self._version_get).scalar() or 0)
        with self._logins_lock:
            if self._writes == writes:  # no write of this server's since the read began: it may have missed one
                self._version_seen = (version, now)
        return version

    def privileges(self, identity: Identity) -> Privileges:
        """The user's own grants and its roles' grants; empty for a user that no longer exists."""
        with self.store.read() as tx:
            if self._user_row(tx, identity) is None:
                return Privileges(identity)
            roles = tuple(r for (r,) in tx.run(self._roles_of, p_name=identity.user, p_host=identity.host).rows)
            rows = tx.run(self._grants_of, p_grantee=str(identity), p_is_role=0).rows
            for role in roles:
                rows += tx.run(self._grants_of, p_grantee=role, p_is_role=1).rows
        grants = [Grant(Scope(db, tbl), Priv(p)) for db, tbl, p in rows]
        return Privileges(identity, tuple(grants), roles)

    def own_grants(self, *, user: Identity | None = None, role: str | None = None) -> list[Grant]:
        grantee, is_role = self._grantee(user, role)
        with self.store.read() as tx:
            rows = tx.run(self._grants_of, p_grantee=grantee, p_is_role=int(is_role)).rows
        return [Grant(Scope(db, tbl), Priv(p)) for db, tbl, p in rows]

    # internals

    @contextmanager
    def _tx(self) -> Iterator[Tx]:
        """An account write; it bumps the accounts' version, so every server's cached logins are read anew."""
        try:
            with self.store.write() as tx:
                tx.lock("accounts")
                yield tx
                if not tx.run(self._version_bump).rowcount:
                    tx.run(self._version_add)
        finally:
            with self._logins_lock:
                self._logins.clear()
                self._version_seen = None
                self._writes += 1

    def _user_row(self, tx: Tx, identity: Identity) -> tuple[str] | None:
        row = tx.run(self._user_row_sql, p_name=identity.user, p_host=identity.host).first()
        return None if row is None else (str(row[0]),)

    def _insert_user(self, tx: Tx, identity: Identity, password_hash: str) -> None:
        tx.run(self._user_add, p_name=identity.user, p_host=identity.host, p_password=password_hash, p_now=time.time())

    def _require_user(self, tx: Tx, identity: Identity) -> None:
        if self._user_row(tx, identity) is None:
            raise DorisError(f"user {identity} does not exist")

    def _require_role(self, tx: Tx, role: str) -> None:
        if tx.run(self._role_row, p_name=role).first() is None:
            raise DorisError(f"role: {role} does not exist")

    def _require_grantee(self, tx: Tx, user: Identity | None, role: str | None) -> None:
        if role is not None:
            self._require_role(tx, role)
        elif user is not None:
            self._require_user(tx, user)

    @staticmethod
    def _grantee(user: Identity | None, role: str | None) -> tuple[str, bool]:
        if (user is None) == (role is None):
            raise ValueError("a grant goes to one user or one role")
        return (role, True) if role is not None else (str(user), False)

    @staticmethod
    def _check_level(privs: Priv, scope: Scope) -> None:
        if privs & GLOBAL_ONLY and not scope.is_global:
            raise DorisError("ADMIN_PRIV and NODE_PRIV can only be granted/revoke on/from *.*.*")

    def _held(self, tx: Tx, grantee: str, is_role: bool, scope: Scope) -> Priv:
        row = tx.run(
            self._grant_get, p_grantee=grantee, p_is_role=int(is_role), p_db=scope.db, p_tbl=scope.table
        ).first()
        return NONE if row is None else Priv(row[0])

    def _put_grant(self, tx: Tx, grantee: str, is_role: bool, scope: Scope, privs: Priv) -> None:
        where = {"p_grantee": grantee, "p_is_role": int(is_role), "p_db": scope.db, "p_tbl": scope.table}
        if privs == NONE:
            tx.run(self._grant_del, **where)
            return
        tx.run(self._grant_put, **where, p_privs=privs.value)


@dataclass
class LoginThrottle:
    """Failed-login backoff per client address: after `max_failures` failed logins within `lock_seconds`, every
    login from that address is refused for `lock_seconds` after the last failure, the right password too (a
    guesser learns nothing while locked). A successful login clears the address's count. In memory: per server.
    """

    max_failures: int = 10
    lock_seconds: float = 60.0
    _failures: dict[str, list[float]] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def check(self, user: str, client: str) -> None:
        """Raises: NotAuthorized while the client is locked out (Doris's blocked-account wording)."""
        if self.max_failures <= 0:
            return
        with self._lock:
            recent = self._recent(client, time.monotonic())
            if len(recent) < self.max_failures:
                return
            remaining = max(1, int(recent[-1] + self.lock_seconds - time.monotonic()))
        raise NotAuthorized(
            f"Access denied for user '{user}'. Logins from {client} are blocked for {int(self.lock_seconds)} "
            f"second(s) ({remaining} second(s) remaining) due to {len(recent)} consecutive failed logins."
        )

    def failed(self, client: str) -> None:
        with self._lock:
            now = time.monotonic()
            self._failures[client] = [*self._recent(client, now), now]
            if len(self._failures) > 10_000:  # bounded: forget the addresses with the oldest failures
                for stale in sorted(self._failures, key=lambda c: self._failures[c][-1])[:5_000]:
                    del self._failures[stale]

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._failures.pop(client, None)

    def _recent(self, client: str, now: float) -> list[float]:
        return [t for t in self._failures.get(client, []) if now - t < self.lock_seconds][-self.max_failures :]


@dataclass
class SharedLoginThrottle(LoginThrottle):
    """`LoginThrottle` across servers sharing a store (PostgreSQL): failures are rows in the store, counted from
    every server, so spreading guesses over N servers gains nothing. A login reads the client's recent count (one
    indexed query); only a client with failures costs a write (its failure, or its count cleared on success)."""

    store: Store | None = None

    def __post_init__(self) -> None:
        if self.store is None:
            raise ValueError("a shared login throttle needs a store")
        self.store.ensure(LOGIN_FAILURES)
        sql, f = self.store.sql, LOGIN_FAILURES.c
        self._recent_sql = sql(
            "login recent",
            lambda: sa.select(sa.func.count(), sa.func.max(f.at)).where(
                f.client == _bp("p_client"), f.at > _bp("p_since", sa.Float)
            ),
        )
        self._add = sql(
            "login add", lambda: sa.insert(LOGIN_FAILURES).values(client=_bp("p_client"), at=_bp("p_now", sa.Float))
        )
        self._clear = sql("login clear", lambda: sa.delete(LOGIN_FAILURES).where(f.client == _bp("p_client")))
        self._expire = sql("login expire", lambda: sa.delete(LOGIN_FAILURES).where(f.at <= _bp("p_since", sa.Float)))
        self._with_failures: set[str] = set()  # clients this server saw failures of: a success clears them

    def check(self, user: str, client: str) -> None:
        """Raises: NotAuthorized while the client is locked out; StoreUnavailable."""
        if self.max_failures <= 0:
            return
        assert self.store is not None
        now = time.time()
        with self.store.read() as tx:
            count, last = tx.run(self._recent_sql, p_client=client, p_since=now - self.lock_seconds).rows[0]
        if not count:
            return
        with self._lock:
            self._with_failures.add(client)
        if count < self.max_failures:
            return
        remaining = max(1, int(float(last) + self.lock_seconds - now))
        count = min(int(count), self.max_failures)
        raise NotAuthorized(
            f"Access denied for user '{user}'. Logins from {client} are blocked for {int(self.lock_seconds)} "
            f"second(s) ({remaining} second(s) remaining) due to {count} consecutive failed logins."
        )

    def failed(self, client: str) -> None:
        if self.max_failures <= 0:
            return
        assert self.store is not None
        now = time.time()
        with self.store.write() as tx:
            tx.run(self._expire, p_since=now - self.lock_seconds)  # bounded: failures past the window go
            tx.run(self._add, p_client=client, p_now=now)
        with self._lock:
            self._with_failures.add(client)

    def succeeded(self, client: str) -> None:
        with self._lock:
            if client not in self._with_failures:
                return
            self._with_failures.discard(client)
        assert self.store is not None
        self.store.write_one(self._clear, p_client=client)

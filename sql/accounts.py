"""Account statements, as Doris spells them: CREATE / DROP / ALTER USER, SET PASSWORD, CREATE / DROP ROLE,
GRANT / REVOKE (privileges or roles), SHOW GRANTS, SHOW ALL GRANTS, SHOW ROLES.

Parsing is pure (a statement becomes a frozen dataclass); `run_account_statement` applies one to the store after
checking the caller may: managing users, roles and grants needs GRANT_PRIV (or ADMIN_PRIV) on `*.*`, as in Doris;
a user may change its own password and see its own grants. GRANT_PRIV does not reach ADMIN_PRIV or NODE_PRIV:
handing one out (directly or by a role holding it) or acting on a user or role that holds one needs the caller to
hold it too, and root's password is root's own (`_check_reach`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import reduce

from sqlglot import TokenType

from sql.results import ExecStatus, ResultSet, StatementResult
from sql.tokens import Cursor
from tables.accounts import (
    ADMIN,
    ANY_HOST,
    BUILTIN_ROLES,
    OPERATOR_ROLE,
    ROOT,
    SUPER,
    AccountStore,
    Grant,
    Identity,
    Priv,
    Privileges,
    Scope,
    check_identity,
    native_password_hash,
    parse_privileges,
    parse_scope,
    specific_denied,
)
from tables.errors import DorisError, SqlError

_HASH_CHARS = frozenset("0123456789ABCDEF")


@dataclass(frozen=True)
class CreateUser:
    identity: Identity
    password_hash: str
    if_not_exists: bool
    role: str | None


@dataclass(frozen=True)
class DropUser:
    identity: Identity
    if_exists: bool


@dataclass(frozen=True)
class SetPassword:
    identity: Identity | None  # None: the caller's own
    password_hash: str


@dataclass(frozen=True)
class RoleDdl:
    create: bool
    role: str
    if_clause: bool  # IF NOT EXISTS / IF EXISTS


@dataclass(frozen=True)
class GrantPrivs:
    grant: bool  # False: REVOKE
    privs: Priv
    scope: Scope
    user: Identity | None
    role: str | None


@dataclass(frozen=True)
class GrantRoles:
    grant: bool
    roles: tuple[str, ...]
    user: Identity


@dataclass(frozen=True)
class ShowGrants:
    identity: Identity | None  # None: the caller's own
    all_users: bool


@dataclass(frozen=True)
class ShowRoles:
    pass


AccountStatement = CreateUser | DropUser | SetPassword | RoleDdl | GrantPrivs | GrantRoles | ShowGrants | ShowRoles


def is_account_statement(first: str, second: str, third: str = "") -> bool:
    """The statement's first words name an account statement (the dispatcher's test)."""
    if first in ("GRANT", "REVOKE"):
        return True
    if first in ("CREATE", "DROP") and second in ("USER", "ROLE"):
        return True
    if first == "ALTER" and second == "USER":
        return True
    if first == "SET" and second == "PASSWORD":
        return True
    return first == "SHOW" and (second in ("GRANTS", "ROLES") or (second == "ALL" and third == "GRANTS"))


def parse_account_statement(text: str) -> AccountStatement:
    """Parse one account statement.

    Raises:
        SqlError: a syntax error, naming what was expected where.
    """
    cur = Cursor(text)
    first = cur.word()
    parsers: dict[str, Callable[[Cursor], AccountStatement]] = {
        "CREATE": _create,
        "DROP": _drop,
        "ALTER": _alter_user,
        "SET": _set_password,
        "GRANT": _grant,
        "REVOKE": _grant,
        "SHOW": _show,
    }
    if first not in parsers:
        raise cur.error("an account statement")
    statement = parsers[first](cur)
    if not cur.at_end():
        raise cur.error("end of statement")
    return statement


def _identity(cur: Cursor) -> Identity:
    """`'u'@'host'`, `u@'%'`, `` `u`@`%` ``, or `'u'` (host `%`)."""
    user = _name_or_string(cur, "a user name")
    host = _name_or_string(cur, "a host") if cur.accept_type(TokenType.PARAMETER) is not None else ANY_HOST
    try:
        return check_identity(Identity(user, host))
    except DorisError as exc:
        raise SqlError(exc.message) from None


def _name_or_string(cur: Cursor, what: str) -> str:
    tok = cur.peek()
    if tok is None or tok.token_type in (TokenType.L_PAREN, TokenType.R_PAREN, TokenType.COMMA, TokenType.EQ):
        raise cur.error(what)
    cur.next()
    return tok.text


def _password(cur: Cursor) -> str:
    """`IDENTIFIED BY 'clear'` or `IDENTIFIED BY PASSWORD '*HASH'` → the stored hash."""
    cur.expect("IDENTIFIED", "BY")
    if cur.accept("PASSWORD"):
        return _hash_literal(cur.string())
    return native_password_hash(cur.string())


def _hash_literal(text: str) -> str:
    if text and not (len(text) == 41 and text[0] == "*" and set(text[1:].upper()) <= _HASH_CHARS):
        raise SqlError("Password hash should be a 41-digit hexadecimal number")
    return text.upper()


def _create(cur: Cursor) -> AccountStatement:
    cur.expect("CREATE")
    if cur.accept("ROLE"):
        if_not_exists = cur.accept("IF", "NOT", "EXISTS")
        role = _name_or_string(cur, "a role name")
        if cur.accept("COMMENT"):
            cur.string()
        return RoleDdl(True, role, if_not_exists)
    cur.expect("USER")
    if_not_exists = cur.accept("IF", "NOT", "EXISTS")
    identity = _identity(cur)
    password_hash = _password(cur) if cur.word() == "IDENTIFIED" else ""
    default_role = _name_or_string(cur, "a role name") if cur.accept("DEFAULT", "ROLE") else None
    if cur.accept("COMMENT"):
        cur.string()
    return CreateUser(identity, password_hash, if_not_exists, default_role)


def _drop(cur: Cursor) -> AccountStatement:
    cur.expect("DROP")
    if cur.accept("ROLE"):
        if_exists = cur.accept("IF", "EXISTS")
        return RoleDdl(False, _name_or_string(cur, "a role name"), if_exists)
    cur.expect("USER")
    if_exists = cur.accept("IF", "EXISTS")
    return DropUser(_identity(cur), if_exists)


def _alter_user(cur: Cursor) -> AccountStatement:
    """`ALTER USER [IF EXISTS] 'u'@'h' IDENTIFIED BY 'p'` (the password is the one attribute kept here)."""
    cur.expect("ALTER", "USER")
    cur.accept("IF", "EXISTS")
    identity = _identity(cur)
    return SetPassword(identity, _password(cur))


def _set_password(cur: Cursor) -> AccountStatement:
    """`SET PASSWORD [FOR 'u'@'h'] = PASSWORD('clear')` or `= '*HASH'`."""
    cur.expect("SET", "PASSWORD")
    identity = _identity(cur) if cur.accept("FOR") else None
    cur.expect_type(TokenType.EQ, "=")
    if cur.accept("PASSWORD"):
        cur.expect_type(TokenType.L_PAREN, "(")
        password_hash = native_password_hash(cur.string())
        cur.expect_type(TokenType.R_PAREN, ")")
    else:
        password_hash = _hash_literal(cur.string())
    return SetPassword(identity, password_hash)


def _grant(cur: Cursor) -> AccountStatement:
    grant = cur.word() == "GRANT"
    cur.next()
    towards = "TO" if grant else "FROM"
    if cur.at(TokenType.STRING):  # GRANT 'role1', 'role2' TO user
        roles = [cur.string()]
        while cur.accept_type(TokenType.COMMA):
            roles.append(cur.string())
        cur.expect(towards)
        return GrantRoles(grant, tuple(roles), _identity(cur))
    names = [_privilege_name(cur)]
    while cur.accept_type(TokenType.COMMA):
        names.append(_privilege_name(cur))
    cur.expect("ON")
    start = cur.i
    while not cur.at_end() and cur.word() != towards:
        cur.next()
    scope_text = "".join(tok.text for tok in cur.tokens[start : cur.i])
    try:
        privs, scope = parse_privileges(names), parse_scope(scope_text)
    except DorisError as exc:  # reworded as a statement error
        raise SqlError(str(exc)) from None
    cur.expect(towards)
    if cur.accept("ROLE"):
        return GrantPrivs(grant, privs, scope, None, _name_or_string(cur, "a role name"))
    return GrantPrivs(grant, privs, scope, _identity(cur), None)


def _privilege_name(cur: Cursor) -> str:
    name = cur.next().text
    if name.upper() == "ALL" and cur.accept("PRIVILEGES"):
        return "ALL PRIVILEGES"
    return name


def _show(cur: Cursor) -> AccountStatement:
    cur.expect("SHOW")
    if cur.accept("ROLES"):
        return ShowRoles()
    if cur.accept("ALL", "GRANTS"):
        return ShowGrants(None, True)
    cur.expect("GRANTS")
    return ShowGrants(_identity(cur) if cur.accept("FOR") else None, False)


# executing


GRANTS_COLUMNS = (
    "UserIdentity",
    "Comment",
    "Password",
    "Roles",
    "GlobalPrivs",
    "CatalogPrivs",
    "DatabasePrivs",
    "TablePrivs",
    "ColPrivs",
    "ResourcePrivs",
    "WorkloadGroupPrivs",
)
ROLES_COLUMNS = (
    "Name",
    "Comment",
    "Users",
    "GlobalPrivs",
    "CatalogPrivs",
    "DatabasePrivs",
    "TablePrivs",
    "ResourcePrivs",
    "WorkloadGroupPrivs",
)


def run_account_statement(statement: AccountStatement, store: AccountStore, caller: Privileges) -> StatementResult:
    """Apply one parsed account statement for `caller`.

    Raises:
        DorisError: the caller lacks GRANT_PRIV, or the store refuses (unknown user, existing role...).
    """
    own = isinstance(statement, SetPassword | ShowGrants) and statement.identity in (None, caller.identity)
    if not own or (isinstance(statement, ShowGrants) and statement.all_users):
        _require_grant_priv(caller)
        _check_reach(statement, store, caller)
    match statement:
        case CreateUser(identity, password_hash, if_not_exists, role):
            store.create_user(identity, password_hash, if_not_exists=if_not_exists)
            if role is not None:
                store.grant_role(role, identity)
        case DropUser(identity, if_exists):
            store.drop_user(identity, if_exists=if_exists)
        case SetPassword(identity, password_hash):
            store.set_password(identity or caller.identity, password_hash)
        case RoleDdl(True, role, if_not_exists):
            store.create_role(role, if_not_exists=if_not_exists)
        case RoleDdl(False, role, if_exists):
            store.drop_role(role, if_exists=if_exists)
        case GrantPrivs(grant, privs, scope, user, role):
            (store.grant if grant else store.revoke)(privs, scope, user=user, role=role)
        case GrantRoles(grant, roles, user):
            for role in roles:
                (store.grant_role if grant else store.revoke_role)(role, user)
        case ShowGrants(identity, all_users):
            users = store.users() if all_users else [identity or caller.identity]
            return ResultSet(
                columns=[(c, "VARCHAR") for c in GRANTS_COLUMNS], rows=[_grants_row(store, u) for u in users]
            )
        case ShowRoles():
            return ResultSet(columns=[(c, "VARCHAR") for c in ROLES_COLUMNS], rows=_roles_rows(store))
    return ExecStatus()


def _require_grant_priv(caller: Privileges) -> None:
    if not caller.allows(Priv.GRANT):
        raise specific_denied("GRANT/ROLE")


def _check_reach(statement: AccountStatement, store: AccountStore, caller: Privileges) -> None:
    """GRANT_PRIV manages users, roles and grants, not ADMIN_PRIV or NODE_PRIV: a statement that would hand one of
    them out (by a grant, or a role holding it), or act on a user or role holding one (take it over by its
    password, drop it), needs the caller to hold it too; root's password is root's own. Checked before anything
    changes.

    Raises:
        DorisError / AccessDenied: the caller does not reach that far.
    """
    match statement:
        case CreateUser(_, _, _, role) if role is not None:
            _require_role_within(store, caller, role, "grant")
        case DropUser(identity, _) if identity not in (Identity(ROOT), Identity(ADMIN)):  # the store refuses those
            _require_target_within(caller, _global_privs(store.privileges(identity).grants))
        case SetPassword(identity, _) if identity is not None:
            if identity == Identity(ROOT) and caller.identity.user != ROOT:
                raise DorisError("Can not set password for root user, except root itself")
            _require_target_within(caller, _global_privs(store.privileges(identity).grants))
        case RoleDdl(False, role, _) if role not in BUILTIN_ROLES:  # the store refuses the built-in ones
            _require_target_within(caller, _global_privs(store.own_grants(role=role)))
        case GrantPrivs(_, privs, _, _, _):
            _require_granted_within(caller, privs)
        case GrantRoles(grant, roles, _):
            for role in roles:
                _require_role_within(store, caller, role, "grant" if grant else "revoke")


def _require_role_within(store: AccountStore, caller: Privileges, role: str, verb: str) -> None:
    """The role exists, is not root's, and holds no ADMIN_PRIV / NODE_PRIV the caller lacks."""
    if role == OPERATOR_ROLE:
        raise DorisError(f"Can not {verb} role: {role}")
    if role not in store.roles():
        raise DorisError(f"role: {role} does not exist")
    _require_granted_within(caller, _global_privs(store.own_grants(role=role)))


def _global_privs(grants: Iterable[Grant]) -> Priv:
    return reduce(lambda held, g: held | g.privs if g.scope.is_global else held, grants, Priv(0))


def _require_granted_within(caller: Privileges, privs: Priv) -> None:
    """Raises: unless the caller holds the ADMIN_PRIV / NODE_PRIV among `privs` it grants or revokes (Doris's rule
    for NODE_PRIV, and for ADMIN_PRIV; NODE_PRIV also covers ADMIN_PRIV)."""
    held = caller.on(None)
    if Priv.NODE in privs and Priv.NODE not in held:
        raise DorisError("Only user with NODE_PRIV can grant/revoke NODE_PRIV to other user")
    if Priv.ADMIN in privs and not held & SUPER:
        raise specific_denied("ADMIN")


def _require_target_within(caller: Privileges, privs: Priv) -> None:
    """Raises: AccessDenied (1227) unless the caller holds the ADMIN_PRIV / NODE_PRIV the user or role it acts on
    holds."""
    held = caller.on(None)
    if Priv.NODE in privs and Priv.NODE not in held:
        raise specific_denied("NODE")
    if Priv.ADMIN in privs and not held & SUPER:
        raise specific_denied("ADMIN")


def _grants_row(store: AccountStore, identity: Identity) -> list[str | None]:
    privileges = store.privileges(identity)
    stored = store.password_hash(identity)
    if stored is None:
        raise SqlError(f"user {identity} does not exist")
    grants = store.own_grants(user=identity)
    for role in privileges.roles:
        grants += store.own_grants(role=role)
    global_privs, dbs, tables = _by_level(grants)
    password = "Yes" if stored else "No"
    roles = ",".join(privileges.roles) or None
    return [str(identity), "", password, roles, global_privs, None, dbs, tables, None, None, None]


def _roles_rows(store: AccountStore) -> list[list[str | None]]:
    rows: list[list[str | None]] = []
    holders: dict[str, list[str]] = {}
    for identity in store.users():
        for role in store.privileges(identity).roles:
            holders.setdefault(role, []).append(str(identity))
    for role in store.roles():
        global_privs, dbs, tables = _by_level(store.own_grants(role=role))
        rows.append([role, "", ", ".join(holders.get(role, [])) or None, global_privs, None, dbs, tables, None, None])
    return rows


def _by_level(grants: list[Grant]) -> tuple[str | None, str | None, str | None]:
    """Doris's SHOW GRANTS cells: global privileges, `internal.db: privs; ...`, `internal.db.tbl: privs; ...`."""
    merged: dict[Scope, Priv] = {}
    for grant in grants:
        merged[grant.scope] = merged.get(grant.scope, Priv(0)) | grant.privs
    global_privs = merged.get(Scope())
    dbs = [f"internal.{s.db}: {p.doris_name}" for s, p in sorted(merged.items(), key=_order) if _level(s) == 1]
    tables = [f"internal.{s}: {p.doris_name}" for s, p in sorted(merged.items(), key=_order) if _level(s) == 2]
    return (global_privs.doris_name if global_privs else None, "; ".join(dbs) or None, "; ".join(tables) or None)


def _level(scope: Scope) -> int:
    return 0 if scope.is_global else 1 if scope.table == "*" else 2


def _order(item: tuple[Scope, Priv]) -> tuple[str, str]:
    return (item[0].db, item[0].table)

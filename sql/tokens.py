"""A small token cursor over sqlglot's tokenizer, for the Doris statements sqlglot cannot parse."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import TokenType
from sqlglot.dialects.doris import Doris
from sqlglot.tokenizer_core import TokenizerCore
from sqlglot.tokens import Token, Tokenizer  # type: ignore[attr-defined]

from tables.errors import SqlError

# The most tokens one request (an HTTP body's `stmt`, a MySQL COM_QUERY) may hold. Every statement is tokenized
# here before sqlglot parses it, and sqlglot's objects take about 270 bytes per token and 750 per parsed node: a
# 2 MB `SELECT 1+1+...` grew the server by 1.5 GB in 37 s, so a 64 MB packet would have ended it. Counted while the
# tokenizer runs, so the refusal comes before the list is built. (Doris has no such cap; bulk data goes by stream
# load.) A statement of long strings (INSERT ... VALUES) holds few tokens per byte.
MAX_TOKENS = 500_000


class TooManyTokens(SqlError):
    def __init__(self) -> None:
        super().__init__(
            f"The statement has more than {MAX_TOKENS} tokens, too many to parse: split it, or load the data by "
            "stream load"
        )


class _BoundedCore(TokenizerCore):
    """sqlglot's tokenizer core, stopping at `MAX_TOKENS` tokens (no new slots, so an instance can take the class)."""

    __slots__ = ()

    def _add(self, token_type: TokenType, text: str | None = None) -> None:
        if len(self.tokens) >= MAX_TOKENS:
            raise TooManyTokens()
        super()._add(token_type, text)


_DORIS = Doris()


def _tokenizer() -> Tokenizer:
    """A tokenizer of its own for each call: sqlglot's keeps its state (text, position, tokens) in the instance, and
    one shared by the server's threads mixed concurrent statements (one user's tokens held another's password)."""
    tokenizer = _DORIS.tokenizer_class()
    tokenizer._core.__class__ = _BoundedCore
    return tokenizer


def tokenize(text: str) -> list[Token]:
    """The Doris tokens of the text.

    Raises:
        SqlError: the text does not tokenize, or holds more than `MAX_TOKENS` tokens.
    """
    try:
        return list(_tokenizer().tokenize(text))
    except Exception as exc:  # sqlglot raises TokenError for unterminated strings and the like
        if isinstance(exc.__cause__, TooManyTokens):
            raise exc.__cause__ from None
        raise SqlError(f"Syntax error: {exc}") from None


def split_statements(text: str) -> list[str]:
    """Split a request into statements on top-level semicolons (strings and comments respected)."""
    tokens = tokenize(text)
    out: list[str] = []
    start = 0
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            piece = text[start : tok.start].strip()
            if piece:
                out.append(piece)
            start = tok.end + 1
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out


@dataclass(frozen=True)
class Target:
    """The database or table a statement names (an unqualified table is in the session's database), with the
    statement's IF [NOT] EXISTS and FORCE words."""

    db: str
    table: str = ""
    if_exists: bool = False  # IF NOT EXISTS for CREATE
    force: bool = False


class Cursor:
    """Reads tokens one by one with keyword helpers; errors name what was expected and where."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0

    def peek(self, offset: int = 0) -> Token | None:
        j = self.i + offset
        return self.tokens[j] if j < len(self.tokens) else None

    def at(self, *types: TokenType) -> bool:
        """The next token is of one of these types."""
        tok = self.peek()
        return tok is not None and tok.token_type in types

    def at_end(self) -> bool:
        return self.i >= len(self.tokens)

    def word(self, offset: int = 0) -> str:
        tok = self.peek(offset)
        if tok is None or tok.token_type in (TokenType.STRING, TokenType.IDENTIFIER):
            return ""
        return tok.text.upper()

    def next(self) -> Token:
        tok = self.peek()
        if tok is None:
            raise SqlError("Syntax error: unexpected end of statement")
        self.i += 1
        return tok

    def accept(self, *words: str) -> bool:
        """Consume the keywords if they all come next."""
        for k, w in enumerate(words):
            if self.word(k) != w:
                return False
        self.i += len(words)
        return True

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            raise self.error(" ".join(words))

    def accept_type(self, token_type: TokenType) -> Token | None:
        tok = self.peek()
        if tok is not None and tok.token_type == token_type:
            self.i += 1
            return tok
        return None

    def expect_type(self, token_type: TokenType, what: str) -> Token:
        tok = self.accept_type(token_type)
        if tok is None:
            raise self.error(what)
        return tok

    def name(self) -> str:
        tok = self.next()
        if tok.token_type == TokenType.STRING or tok.token_type in (
            TokenType.L_PAREN,
            TokenType.R_PAREN,
            TokenType.COMMA,
            TokenType.EQ,
        ):
            self.i -= 1
            raise self.error("a name")
        return tok.text

    def string(self) -> str:
        tok = self.next()
        if tok.token_type not in (TokenType.STRING, TokenType.NUMBER, TokenType.IDENTIFIER):
            if tok.token_type == TokenType.NULL:
                return "NULL"
            self.i -= 1
            raise self.error("a string")
        return tok.text

    def qualified_name(self) -> tuple[str | None, str]:
        first = self.name()
        if self.accept_type(TokenType.DOT):
            return first, self.name()
        return None, first

    def table(self, current_db: str) -> Target:
        """`[db.]name`, the database defaulting to `current_db`."""
        db, name = self.qualified_name()
        return Target(db=db or current_db, table=name)

    def skip_parens(self) -> None:
        """Skip a balanced parenthesised group (clauses we accept and ignore)."""
        self.expect_type(TokenType.L_PAREN, "(")
        depth = 1
        while depth:
            tok = self.next()
            if tok.token_type == TokenType.L_PAREN:
                depth += 1
            elif tok.token_type == TokenType.R_PAREN:
                depth -= 1

    def error(self, expected: str) -> SqlError:
        tok = self.peek()
        if tok is None:
            return SqlError(f"Syntax error: expected {expected} at end of statement")
        return SqlError(f"Syntax error at line {tok.line}, column {tok.col}: expected {expected}, found '{tok.text}'")

"""Files in a run folder or a cache, opened as a careful tool opens them: never through a symbolic link (a
link planted in a run folder would make a command read or write another file), only regular files and
folders, and written whole or not at all (a temporary name beside the file, then a rename: a reader sees
the old bytes or the new, never a part). What is read back is checked where it is read, against the
dataclass it fills (`check_record`): a damaged file or field is a DamagedFile naming both, in one line,
before the value reaches code that would fail on it half-way through its work.

Every command and module that reads or writes such a file goes through here. Standard library only: it
is imported by the kernel cache, the store and the report alike.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import errno
import fcntl
import json
import math
import os
import stat
import sys
import tempfile
import types
import typing
from pathlib import Path
from typing import Any, Callable, Literal, Union


class UnsafePath(OSError):
    """A path that is a symbolic link, or not the kind of entry it must be (a regular file, a folder)."""


def _refused(path: Path, err: OSError) -> OSError:
    if err.errno == errno.ELOOP:
        return UnsafePath(f"{path} is a symbolic link: refused (it could point outside the folder)")
    return err


def open_regular(path: str | Path, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """os.open with O_NOFOLLOW; UnsafePath unless the result is a regular file. The caller closes the fd.
    O_NONBLOCK keeps a FIFO at the name from blocking the open (it changes nothing for a regular file)."""
    path = Path(path)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as err:
        raise _refused(path, err) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafePath(f"{path} is not a regular file")
    return fd


def read_bytes(path: str | Path, limit: int | None = None) -> bytes | None:
    """The file's bytes, None when absent; UnsafePath for a link or a non-regular file. With `limit`, a
    DamagedFile for a file of more bytes, said before any is read (a planted sparse file of gigabytes
    takes no disk and would take that much memory)."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(fd).st_size
        if limit is not None and size > limit:
            raise DamagedFile(path, "", f"{size} bytes, more than the {limit} it can hold")
        data = f.read(size if limit is None else limit + 1)
        if limit is not None and len(data) > limit:  # grew since: the same refusal
            raise DamagedFile(path, "", f"more than the {limit} bytes it can hold")
        return data


def read_text(path: str | Path, limit: int | None = None) -> str | None:
    """The file's text (UTF-8), None when absent; UnicodeDecodeError (a ValueError) for other bytes; a
    DamagedFile for a file over `limit` bytes (`read_bytes`)."""
    data = read_bytes(path, limit)
    return None if data is None else data.decode("utf-8")


def append_text(path: str | Path, text: str) -> None:
    """Append `text` in one write (created 0o644 when absent), never through a link."""
    fd = open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def write_atomic(path: str | Path, data: bytes, mode: int = 0o644) -> None:
    """Write `data` to a temporary file beside `path`, flush it to disk and rename it over `path` (a link at
    `path` is replaced, never followed). A subfolder of a run folder is checked first (`check_folder`)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_folder(path: str | Path, create: bool = False) -> Path:
    """`path` as a real folder (made, with its parents, when `create`); UnsafePath for a link or a file."""
    path = Path(path)
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except FileExistsError:  # a file, or a link to nothing: said below
            pass
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"{path} is a symbolic link: refused (it could point outside the folder)")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{path} is not a folder")
    return path


def check_entry(path: str | Path) -> bool:
    """Whether `path` exists, as a regular file; UnsafePath for a link or another kind of entry. For files
    another library opens by name (SQLite's database and its -wal, -shm and -journal)."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"{path} is a symbolic link: refused (it could point outside the folder)")
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePath(f"{path} is not a regular file")
    return True


def append_line(path: str | Path, line: str) -> None:
    """Append one line of text and flush it to disk; a last line torn by a kill is ended first, so only it is
    lost (`read_jsonl` skips it). Never through a link."""
    fd = open_regular(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
    try:
        size = os.fstat(fd).st_size
        torn = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
        os.write(fd, (("\n" if torn else "") + line.rstrip("\n") + "\n").encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


class DamagedFile(ValueError):
    """A file whose content, or one field of it, is not what it must be."""

    def __init__(self, path: str | Path, field: str, problem: str):
        super().__init__(f"{path}: {field}: {problem}" if field else f"{path}: {problem}")


MAX_JSON_DEPTH = 64  # far deeper than anything the package writes (a run's config: 4 levels)
# far more than any JSON or JSON-lines file the package writes holds (a shipped prior: under 1 MB; a
# re-training ledger of thousands of rows: a few MB); a larger one is refused before it is read
MAX_JSON_BYTES = 256 << 20


def parse_json(text: str | bytes) -> Any:
    """`json.loads` for everything the package reads back: ValueError, never RecursionError, for
    text nested deeper than MAX_JSON_DEPTH. No file of ours is, and every reader that walks a
    value (type checks, reports) would otherwise exhaust the stack on one planted deep list."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    check_depth(value)
    return value


def check_depth(value: Any) -> None:
    """ValueError for a JSON value nested deeper than MAX_JSON_DEPTH (`parse_json`)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
            stack.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))


def read_json(path: str | Path) -> Any:
    """The JSON value of a file (None when absent); DamagedFile when it is not UTF-8 JSON, or
    nested too deep (`parse_json`)."""
    try:
        text = read_text(path, MAX_JSON_BYTES)
        return None if text is None else parse_json(text)
    except DamagedFile:
        raise
    except ValueError as err:
        raise DamagedFile(path, "", f"not valid JSON ({err})") from None


def check_writable(path: str | Path) -> None:
    """OSError unless `update_json` could rewrite `path`: the file opens for writing, and its lock
    file can be made beside it. Tried, not inferred from the modes (root writes through them; a
    read-only mount refuses everyone)."""
    path = Path(path)
    os.close(open_regular(path, os.O_RDWR))
    os.close(open_regular(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT))


def update_json(path: str | Path, change: Callable[[Any], Any], *, create: bool = False) -> None:
    """Rewrite a JSON file with `change(value)` (None when absent: only with `create`), holding
    `<path>.lock` from the read to the rename. Other processes update the same file: two updates at
    once would each keep only their own change, and the later rename would erase the earlier one's.
    A blocking flock, which the OS drops when its holder dies."""
    path = Path(path)
    fd = open_regular(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        value = read_json(path)
        if value is None and not create:
            raise FileNotFoundError(f"{path} does not exist")
        write_atomic(path, (json.dumps(change(value), indent=1) + "\n").encode())
    finally:
        os.close(fd)  # closing drops the lock


def read_jsonl(path: str | Path, cls: type, check: Callable[[Any], str | None] | None = None) -> list:
    """The rows of a JSON-lines file as `cls` dataclasses (none when absent), each checked (`check_record`).
    A line that is not JSON is a write torn by a kill (`append_line` ends it before the next row) and is
    skipped, never counted: its run is done again. A line that is JSON but not a valid row is a
    DamagedFile naming its number and field. A row of the right types whose values cannot be true
    (`check` names what: a NaN or infinite score, an accuracy above 1) is dropped as a torn one is, with
    one warning for the file: counted, it would skew every mean and test the report draws from it."""
    try:
        text = read_text(path, MAX_JSON_BYTES)
    except DamagedFile:
        raise
    except ValueError as err:
        raise DamagedFile(path, "", f"not UTF-8 text ({err})") from None
    if text is None:
        return []
    rows, dropped = [], []
    for n, line in enumerate(text.split("\n"), 1):
        try:
            data = json.loads(line)
        except ValueError:  # torn (or empty): not a row
            continue
        except RecursionError:
            raise DamagedFile(path, f"line {n}", f"nested deeper than {MAX_JSON_DEPTH} levels") from None
        try:
            check_depth(data)
        except ValueError as err:
            raise DamagedFile(path, f"line {n}", str(err)) from None
        row = cls(**check_record(cls, data, path, f"line {n}"))
        problem = check(row) if check else None
        if problem is None:
            rows.append(row)
        else:
            dropped.append(f"line {n}: {problem}")
    if dropped:
        warn(f"dropped {len(dropped)} row(s) of {path} that cannot be true "
             f"({dropped[0]}{', ...' if len(dropped) > 1 else ''})")
    return rows


def warn(message: str) -> None:
    """One warning line on stderr, quoted where it holds a control character (it names what a file holds)."""
    print(f"evonorm: warning: {printable(message)}", file=sys.stderr, flush=True)


def printable(text: str, keep: str = "") -> str:
    """`text` with every character that does not print (a line break, ESC, NUL, ...), but those in `keep`,
    written as its escape: text read from a run (a phase, a reason, a name) reaches a terminal or a page
    only so, since a raw control sequence there can clear the screen or set the window's title."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else ascii(c)[1:-1] for c in text)


def number_problem(value: float | None, low: float = -math.inf, high: float = math.inf) -> str | None:
    """What is wrong with a number read back (None: nothing, or no number): not finite, or outside
    [low, high]."""
    if value is None:
        return None
    if not math.isfinite(value):
        return f"the number {value}, not a finite number"
    if not low <= value <= high:
        return f"{value}, not between {low} and {high}"
    return None


def check_record(cls: type, data: Any, path: str | Path, where: str, unknown: bool = False) -> dict:
    """`data` as the keyword arguments of dataclass `cls`: an object whose fields have the types `cls`
    declares, required ones present, none unknown (unless `unknown`); DamagedFile naming `path`, `where` and
    the field otherwise."""
    if not isinstance(data, dict):
        raise DamagedFile(path, where, f"{describe(data)}, not an object")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    for name, value in data.items():
        if name not in known:
            if unknown:
                continue
            raise DamagedFile(path, f"{where}: {key_text(name)}" if where else key_text(name),
                              "an unknown field")
        problem = type_problem(value, hints[name])
        if problem is not None:
            raise DamagedFile(path, f"{where}: {name}" if where else name, problem)
    for name, f in known.items():
        if (name not in data and f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING and not unknown):
            raise DamagedFile(path, f"{where}: {name}" if where else name, "missing")
    return data


def type_problem(value: Any, hint: Any) -> str | None:
    """What is wrong with a JSON value read for a field of type `hint` (None: nothing). Covers the types a
    stored record uses: None, bool, int, float, str, unions, Literal, dict/Mapping, list/tuple/Sequence and
    nested dataclasses; anything else is not checked."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return None
    if hint is None or hint is type(None):
        return None if value is None else f"{describe(value)}, not null"
    if origin in (Union, types.UnionType):
        problems = [type_problem(value, a) for a in args]
        return None if None in problems else f"{describe(value)}, not {' or '.join(kind(a) for a in args)}"
    if origin is Literal:
        return None if value in args else f"{describe(value)}, not one of {', '.join(map(repr, args))}"
    if hint in (bool, int, float, str):
        ok = (isinstance(value, bool) if hint is bool else
              isinstance(value, str) if hint is str else
              not isinstance(value, bool) and isinstance(value, (int, float) if hint is float else int))
        return None if ok else f"{describe(value)}, not {kind(hint)}"
    if hint is dict or origin in (dict, collections.abc.Mapping):
        if not isinstance(value, dict):
            return f"{describe(value)}, not an object"
        for k, v in value.items():
            problem = type_problem(v, args[1]) if args else None
            if problem is not None:
                return f"{key_text(k)}: {problem}"
        return None
    if hint in (list, tuple) or origin in (list, tuple, collections.abc.Sequence):
        if not isinstance(value, list):
            return f"{describe(value)}, not a list"
        element = args[0] if args and (len(args) == 1 or args[1] is Ellipsis) else Any
        for i, v in enumerate(value):
            problem = type_problem(v, element)
            if problem is not None:
                return f"item {i}: {problem}"
        return None
    if dataclasses.is_dataclass(hint):
        try:
            check_record(hint, value, "", "")
        except DamagedFile as err:
            return str(err).removeprefix(": ")
    return None


def kind(hint: Any) -> str:
    """A type as the JSON value it stands for: "a number", "a string", "null", ..."""
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string", type(None): "null",
             None: "null", dict: "an object", list: "a list", tuple: "a list"}
    return names.get(hint) or names.get(typing.get_origin(hint)) or getattr(hint, "__name__", str(hint))


def key_text(key: str) -> str:
    """A field name read from a file, for a one-line message: quoted where it holds a line break or
    another character that does not print."""
    return key if key.isprintable() else json.dumps(key)


def describe(value: Any) -> str:
    """A JSON value for a message: its kind and a short form of it."""
    if value is None:
        return "null"
    if isinstance(value, float) and not math.isfinite(value):
        return f"the number {value}"
    text = json.dumps(value)
    short = text if len(text) <= 40 else text[:37] + "..."
    for t in (bool, int, float, str, dict, list):
        if isinstance(value, t):
            return f"{kind(t)} ({short})"
    return short

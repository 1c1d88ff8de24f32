"""nbgrader's gradebook, checked before grading and written one submission at a time.

:func:`open_gradebook` checks the URL, its driver, the connection and the schema before anything
is graded, so that a missing package or a wrong address costs seconds, not a run. Each graded
submission is then one transaction: nbgrader's rows (student, submission, a grade per test cell)
and the course's own record of it (every test's verdict and message, the notes, the digest of
what was graded), so an interrupted run keeps everything it finished and a later run knows what
is still to do. Feedback and grade files are made from those records alone (:mod:`.exports`).

Any number of processes may write into one gradebook at once. Creating the schema, the course
and the assignment is serialised by a lock (PostgreSQL's advisory lock; for SQLite a lock on the
database's folder); PostgreSQL writers also serialise their short transactions on an advisory
lock, SQLite writers take the write lock when a transaction begins; and a transaction that still
meets a conflict (a row another process created a moment ago, a busy database) is retried.
"""
from __future__ import annotations

import copy
import dataclasses
import fcntl
import hashlib
import json
import os
import random
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Column, DateTime, MetaData, String, Table, Text, create_engine, event, select, text
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, NoSuchModuleError, OperationalError
from sqlalchemy.orm import Session

from course.layout import SUBMISSION_SECRET, TIMESTAMP

from .. import course_secret
from ..assignment import Assignment
from ..engine import Result, TestOutcome
from ..submissions import Submission, safe_name

#: the Python package that provides each database driver SQLAlchemy may ask for
DRIVER_PACKAGES = {
    "psycopg": "psycopg[binary]",
    "psycopg2": "psycopg2-binary",
    "pg8000": "pg8000",
    "asyncpg": "asyncpg",
    "pymysql": "PyMySQL",
    "mysqldb": "mysqlclient",
    "mysqlconnector": "mysql-connector-python",
    "oracledb": "oracledb",
    "pyodbc": "pyodbc",
}
#: PostgreSQL advisory lock keys: one for creating the schema and the assignment, one for writes
SCHEMA_LOCK, WRITE_LOCK = 0x61697961_6E6E0001, 0x61697961_6E6E0002
ATTEMPTS = 8
#: a stored error that was the grader's fault, not the submission's: such a submission is graded again
GRADER_FAULTS = ("the grader's worker failed", "the grader failed on this submission")

RECORDS = Table(
    "autograder_result", MetaData(),
    Column("assignment", String(128), primary_key=True),
    Column("learner", String(128), primary_key=True),
    Column("notebook", String(128), nullable=False),
    Column("submission", String(64), nullable=False),  # digest of the handed-in notebook and its timestamp
    Column("grader", String(64), nullable=False),  # digest of the tests it was graded with
    Column("timestamp", String(100)),  # the submission's timestamp.txt, as nbgrader wrote it
    Column("secret", String(256)),  # its submission_secret.txt: where nbgrader's exchange files its feedback
    Column("graded_at", DateTime(), nullable=False),
    Column("result", Text(), nullable=False),  # the Result, as JSON
)


class GradebookError(Exception):
    """The gradebook cannot be used; the message says why and what to do."""


def shown(url: URL | str) -> str:
    """A URL fit to print: without its password."""
    try:
        return make_url(url).render_as_string(hide_password=True) if isinstance(url, str) else url.render_as_string()
    except ArgumentError:
        return str(url)


def _url(db_url: str) -> URL:
    try:
        url = make_url(db_url)
    except ArgumentError:
        raise GradebookError(f"{db_url!r} is not a database URL (for example sqlite:///gradebook.db or "
                             "postgresql://user@host/dbname)") from None
    try:
        dialect = url.get_dialect()
    except NoSuchModuleError:
        raise GradebookError(f"the gradebook URL {shown(url)} names a database kind SQLAlchemy does not know "
                             f"({url.drivername!r})") from None
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        driver = getattr(dialect, "driver", url.get_driver_name())
        package = DRIVER_PACKAGES.get(driver, driver)
        raise GradebookError(
            f"the gradebook {shown(url)} needs the database driver {driver!r}, which is not installed "
            f"({exc}): install it with `pip install '{package}'` in the course's environment") from None
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        folder = Path(url.database).resolve().parent
        if not folder.is_dir():
            raise GradebookError(f"the folder of the gradebook {shown(url)} does not exist: {folder}")
        if not os.access(folder, os.W_OK):
            raise GradebookError(f"the folder of the gradebook {shown(url)} is not writable: {folder}")
    return url


def _engine(url: URL) -> Engine:
    if url.get_backend_name() != "sqlite":
        return create_engine(url, future=True, pool_pre_ping=True)
    engine = create_engine(url, future=True, connect_args={"timeout": 60})

    # pysqlite begins a transaction only at the first write, after the reads that decided it:
    # two processes that both read, then both write, deadlock. BEGIN IMMEDIATE takes the write
    # lock first, so SQLite's own busy wait orders the writers.
    @event.listens_for(engine, "connect")
    def _no_implicit_transactions(dbapi_connection, _record):
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin_immediate(connection):
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def _transient(exc: Exception) -> bool:
    """A conflict that the same transaction, tried again, resolves."""
    if isinstance(exc, IntegrityError):
        return True  # a row another process created between our read and our write
    if isinstance(exc, OperationalError | DBAPIError):
        words = str(exc).lower()
        return exc.connection_invalidated or any(w in words for w in (
            "locked", "busy", "deadlock", "could not serialize", "serialization", "already exists", "duplicate"))
    return False


#: what a database that has gone away says (restarted, shut down, cut off): not the transaction's fault, and it
#: may come back
_GONE = ("connection refused", "could not connect", "server closed the connection", "terminating connection",
         "connection is closed", "connection reset", "no route to host", "the database system is starting up",
         "the database system is shutting down", "the database system is in recovery mode", "no such file or directory")
#: the environment variable that sets how long a gradebook that stops answering is waited for (seconds)
WAIT_ENV = "AUTOGRADER_DB_WAIT"
#: how long, when it is not set: a database's restart, or a short network cut, is waited out
DEFAULT_WAIT = 300.0


def outage_wait() -> float:
    """How long a gradebook that stops answering is waited for: ``AUTOGRADER_DB_WAIT`` seconds, else 300."""
    try:
        return max(0.0, float(os.environ.get(WAIT_ENV, DEFAULT_WAIT)))
    except ValueError:
        return DEFAULT_WAIT


def _gone(exc: Exception) -> bool:
    """Whether the database has gone away (rather than the transaction meeting a conflict)."""
    return isinstance(exc, DBAPIError) and not isinstance(exc, IntegrityError) and (
        exc.connection_invalidated or any(w in str(exc).lower() for w in _GONE))


def retried(action, what: str):
    """``action()``, tried again while it meets transient conflicts (a growing, jittered pause, a few times), and
    while the database does not answer, for as long as :func:`outage_wait` says, said once on stderr."""
    wait = outage_wait()
    conflicts, deadline = 0, None
    while True:
        try:
            return action()
        except (DBAPIError, IntegrityError) as exc:
            first = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            if _gone(exc):
                now = time.monotonic()
                if deadline is None:
                    deadline = now + wait
                    print(f"the gradebook does not answer ({first}): {what} waits up to {wait:g} s for it to come back "
                          f"({WAIT_ENV} sets how long)", file=sys.stderr, flush=True)
                if now >= deadline:
                    raise GradebookError(f"{what} failed: the gradebook did not answer for {wait:g} s: {first}") from exc
                time.sleep(min(2.0, deadline - now))
                continue
            conflicts += 1
            if conflicts >= ATTEMPTS or not _transient(exc):
                raise GradebookError(f"{what} failed: {first}") from exc
            time.sleep(min(2.0, 0.05 * 2 ** (conflicts - 1)) * (0.5 + random.random()))


class Gradebook:
    """One gradebook, its schema checked; see :func:`open_gradebook`."""

    def __init__(self, url: URL):
        self.url = url
        self.engine = _engine(url)
        self.postgres = url.get_backend_name() == "postgresql"

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Gradebook:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __str__(self) -> str:
        return shown(self.url)

    # -- the schema, the course and the assignment ------------------------------------------------

    @contextmanager
    def _schema_lock(self) -> Iterator[None]:
        """Held while the schema or an assignment is created, by one process at a time."""
        if self.postgres:
            with self.engine.connect() as conn:
                conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": SCHEMA_LOCK})
                conn.commit()
                try:
                    yield
                finally:
                    conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": SCHEMA_LOCK})
                    conn.commit()
        elif self.url.get_backend_name() == "sqlite" and self.url.database not in (None, "", ":memory:"):
            fd = os.open(Path(self.url.database).resolve().parent, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)
        else:
            yield

    def check(self) -> None:
        """Connect, and refuse a schema that nbgrader would have to upgrade first. Writes nothing."""
        from sqlalchemy import inspect

        if self.url.get_backend_name() == "sqlite" and self.url.database and not Path(self.url.database).exists():
            return  # a new gradebook, made by prepare(); connecting now would leave an empty file behind
        try:
            # Under the lock: another process may be half way through creating the schema.
            with self._schema_lock(), self.engine.connect() as conn:
                tables = set(inspect(conn).get_table_names())
                version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar() \
                    if "alembic_version" in tables else None
        except DBAPIError as exc:
            raise GradebookError(f"cannot open the gradebook {self}: {str(exc.orig).strip() or exc}") from None
        if version is not None:
            from nbgrader.api import get_alembic_version

            head = get_alembic_version()
            if version != head:
                raise GradebookError(
                    f"the gradebook {self} has nbgrader's schema version {version}, this nbgrader expects {head}: "
                    "back it up, then run `nbgrader db upgrade`")
        elif tables - {RECORDS.name}:
            raise GradebookError(f"the database {self} holds tables but no nbgrader schema: is it a gradebook?")

    def prepare(self, assignment: Assignment, source_nb) -> None:
        """nbgrader's schema, the course's records table, the assignment and its cells: created
        where missing, once, however many processes ask at the same moment."""
        def create() -> None:
            from nbgrader.api import Gradebook as NbgraderGradebook
            from nbgrader.api import MissingEntry

            with self._schema_lock():
                # nbgrader's own constructor creates its tables, stamps alembic and adds the course.
                with NbgraderGradebook(self.url) as gb:
                    try:
                        gb.find_notebook(assignment.notebook, assignment.name)
                        missing = False
                    except MissingEntry:
                        gb.update_or_create_assignment(assignment.name)
                        missing = True
                RECORDS.create(self.engine, checkfirst=True)
                if missing:
                    _save_cells(self.url, assignment, source_nb)

        retried(create, f"preparing the gradebook {self} for {assignment.name}")

    # -- one submission -----------------------------------------------------------------------------

    def record(self, assignment: Assignment, result: Result, key: SubmissionKey, keep_by_hand: bool = True) -> datetime:
        """The submission's grades and the course's record of it, in one transaction; returns
        the time it records as graded (UTC), which the feedback page shows. What the instructor gave by hand
        in formgrader (scores, extra credit, comments) is kept, unless not ``keep_by_hand``."""
        graded_at = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
        if not safe_name(result.learner):
            return graded_at  # never an id in the gradebook

        def write() -> None:
            with Session(self.engine) as session, session.begin():
                if self.postgres:
                    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": WRITE_LOCK})
                _write_grades(session, assignment, result, key.timestamp, keep_by_hand)
                session.execute(RECORDS.delete().where(RECORDS.c.assignment == assignment.name,
                                                       RECORDS.c.learner == result.learner))
                session.execute(RECORDS.insert().values(
                    assignment=assignment.name, learner=result.learner, notebook=assignment.notebook,
                    submission=key.submission, grader=key.grader, timestamp=key.timestamp, secret=key.secret,
                    graded_at=graded_at, result=json.dumps(to_dict(result))))

        retried(write, f"recording {result.learner}'s grades in {self}")
        return graded_at

    # -- what is there ------------------------------------------------------------------------------

    def graded(self, assignment: str, learners: set[str] | None = None) -> list[Record]:
        """The course's records of an assignment, by learner, with what the instructor gave by hand in formgrader
        (:func:`with_by_hand`): the grades every file the course writes holds."""
        by_hand = self.by_hand(assignment, learners)
        return [dataclasses.replace(r, result=with_by_hand(r.result, by_hand.get(r.learner)))
                for r in self.records(assignment, learners)]

    def by_hand(self, assignment: str, learners: set[str] | None = None) -> dict[str, ByHand]:
        """What formgrader recorded in nbgrader's tables for each learner of an assignment (or of ``learners``):
        scores, extra credit and comments given by hand."""
        def read() -> dict[str, ByHand]:
            from nbgrader import api

            out: dict[str, ByHand] = {}
            with Session(self.engine) as session:
                if not self.engine.dialect.has_table(session.connection(), api.Grade.__tablename__):
                    return {}
                query = select(api.SubmittedAssignment).join(api.Assignment).where(api.Assignment.name == assignment)
                if learners is not None:
                    query = query.where(api.SubmittedAssignment.student_id.in_(sorted(learners)))
                submissions = session.scalars(query).all()
                for submission in submissions:
                    scores, extra, comments = {}, {}, []
                    for nb in submission.notebooks:
                        for grade in nb.grades:
                            if grade.manual_score is not None:
                                scores[grade.cell.name] = float(grade.manual_score)
                            if grade.extra_credit:
                                extra[grade.cell.name] = float(grade.extra_credit)
                        for comment in nb.comments:
                            if (comment.manual_comment or "").strip():
                                comments.append((comment.cell.name, comment.manual_comment.strip()))
                    if scores or extra or comments:
                        out[submission.student.id] = ByHand(scores, extra, tuple(sorted(comments)))
            return out

        return retried(read, f"reading the grades given by hand for {assignment} from {self}")

    def records(self, assignment: str, learners: set[str] | None = None) -> list[Record]:
        """The course's records of an assignment, by learner (as graded: see :meth:`graded` for the grades)."""
        def read() -> list[Record]:
            with self.engine.connect() as conn:
                if not self.engine.dialect.has_table(conn, RECORDS.name):
                    return []
                rows = conn.execute(select(RECORDS).where(RECORDS.c.assignment == assignment)
                                    .order_by(RECORDS.c.learner)).mappings().all()
            return [Record.from_row(r) for r in rows if learners is None or r["learner"] in learners]

        return retried(read, f"reading {assignment} from {self}")

    def to_grade(self, assignment: Assignment, source_nb, submissions: list[Submission], max_bytes: int,
                 regrade: bool = False) -> tuple[list[tuple[Submission, SubmissionKey]], int]:
        """The submissions that are not graded yet, were handed in again, or changed since (or all
        with ``regrade``), each with its key; and how many were skipped as already graded."""
        pending, skipped = [], 0
        for submission, key, _, why in self._states(assignment, source_nb, submissions, max_bytes):
            if not regrade and not why:
                skipped += 1
                continue
            pending.append((submission, key))
        return pending, skipped

    def _states(self, assignment: Assignment, source_nb, submissions: list[Submission], max_bytes: int
                ) -> Iterator[tuple[Submission, SubmissionKey, Record | None, str]]:
        """Each submission with its key, its record (None for none) and why it is not graded as it stands ("" when
        it is)."""
        done = {r.learner: r for r in self.records(assignment.name)}
        grader = grader_digest(assignment, source_nb)
        for submission in submissions:
            key = submission_key(submission, grader, max_bytes)
            record = done.get(submission.learner)
            why = ("never graded" if record is None else
                   "handed in again since it was graded" if record.submission != key.submission else
                   "graded with other tests or another grader" if record.grader != grader else
                   f"the grader failed: {record.result.error}" if (record.result.error or "").startswith(GRADER_FAULTS)
                   else "")
            yield submission, key, record, why

    def status(self, assignment: Assignment, source_nb, submissions: list[Submission], max_bytes: int
               ) -> ClassStatus:
        """Which of the class's ``submissions`` the gradebook holds graded as they stand, and which not."""
        graded, failed, missing = [], [], []
        for submission, _, record, why in self._states(assignment, source_nb, submissions, max_bytes):
            if why:
                missing.append((submission.learner, why))
                continue
            graded.append(submission.learner)
            if record.result.error:
                failed.append((submission.learner, record.result.error))
        return ClassStatus(assignment.name, tuple(graded), tuple(failed), tuple(missing))


def alembic_on_path() -> None:
    """nbgrader's gradebook runs the `alembic` program that sits beside this Python."""
    import sys

    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


def open_gradebook(db_url: str) -> Gradebook:
    """The gradebook at ``db_url``, checked: its URL, its driver, the connection and the schema."""
    alembic_on_path()
    gradebook = Gradebook(_url(db_url))
    try:
        gradebook.check()
    except BaseException:
        gradebook.close()
        raise
    return gradebook


def _save_cells(url: URL, assignment: Assignment, source_nb) -> None:
    """The notebook and its grade cells, recorded by nbgrader's own preprocessors (as
    `nbgrader generate_assignment` does), from a copy: they write checksums into the notebook they are
    given, and the source notebook the autograded copies are made from must be the same in every run,
    whichever of a class's shards created the assignment."""
    from nbgrader.preprocessors import ComputeChecksums, SaveCells

    db_url = url.render_as_string(hide_password=False)
    resources = {"nbgrader": {"notebook": assignment.notebook, "assignment": assignment.name, "db_url": db_url}}
    nb, resources = ComputeChecksums().preprocess(copy.deepcopy(source_nb), resources)
    SaveCells().preprocess(nb, resources)


def _write_grades(session: Session, assignment: Assignment, result: Result, timestamp: str | None,
                  keep_by_hand: bool = True) -> None:
    """nbgrader's rows for one submission, as its ``add_submission`` lays them out, and the
    automatic score of every graded cell, which then needs no grading by hand; a submission the course
    flags for review is flagged where formgrader shows it. What formgrader recorded by hand stays, unless
    not ``keep_by_hand``. Nothing is committed here."""
    from nbgrader import api
    from nbgrader.utils import parse_utc

    student = session.get(api.Student, result.learner)
    if student is None:
        student = api.Student(id=result.learner)
        session.add(student)
    nb_assignment = session.scalars(select(api.Assignment).where(api.Assignment.name == assignment.name)).one()
    submission = session.scalars(select(api.SubmittedAssignment).where(
        api.SubmittedAssignment.assignment_id == nb_assignment.id,
        api.SubmittedAssignment.student_id == result.learner)).one_or_none()
    if submission is None:
        # Built whole, then added: adding it cascades to every row below it (a row only linked to
        # one already in the session would not be saved).
        with session.no_autoflush:
            submission = api.SubmittedAssignment(assignment=nb_assignment, student=student)
            for notebook in nb_assignment.notebooks:
                nb = api.SubmittedNotebook(notebook=notebook, assignment=submission)
                for cell in notebook.grade_cells:
                    api.Grade(cell=cell, notebook=nb)
                for cell in notebook.solution_cells:
                    api.Comment(cell=cell, notebook=nb)
                for cell in notebook.task_cells:
                    api.Comment(cell=cell, notebook=nb)
                    api.Grade(cell=cell, notebook=nb)
            session.add(submission)
    if timestamp is not None:
        try:
            submission.timestamp = parse_utc(timestamp)
        except Exception:  # a malformed timestamp is only a missing one
            pass
    session.flush()
    points = {o.grade_id: o.points for o in result.outcomes}
    for nb in submission.notebooks:
        if nb.notebook.name != assignment.notebook:
            continue
        if result.flags:
            nb.flagged = True  # an instructor's own flag is theirs to clear, not the grader's
        for grade in nb.grades:
            if grade.cell.name in points:
                grade.auto_score = points[grade.cell.name]
                grade.needs_manual_grade = False
            if not keep_by_hand:
                grade.manual_score = grade.extra_credit = None
        if not keep_by_hand:
            for comment in nb.comments:
                comment.manual_comment = None


@dataclasses.dataclass(frozen=True)
class ByHand:
    """What an instructor gave one submission by hand in formgrader: scores (by grade cell), extra credit,
    and comments (cell, text)."""

    scores: dict[str, float]
    extra_credit: dict[str, float]
    comments: tuple[tuple[str, str], ...] = ()


def with_by_hand(result: Result, by_hand: ByHand | None) -> Result:
    """The result with what the instructor gave by hand: a score given by hand replaces the grader's for its
    test (as in nbgrader), extra credit is added, and each is said in a note, as are the instructor's comments."""
    if by_hand is None:
        return result
    outcomes, notes = [], []
    for o in result.outcomes:
        points = by_hand.scores.get(o.grade_id, o.points) + by_hand.extra_credit.get(o.grade_id, 0.0)
        if points != o.points:
            said = f"{o.grade_id}: {points:g} / {o.max_points:g}, given by the instructor (the grader gave {o.points:g}"
            said += f", with {by_hand.extra_credit[o.grade_id]:g} extra credit)" if o.grade_id in by_hand.extra_credit \
                else ")"
            notes.append(said)
        outcomes.append(dataclasses.replace(o, points=points))
    notes += [f"The instructor's comment on {cell}: {text}" for cell, text in by_hand.comments]
    return dataclasses.replace(result, outcomes=outcomes, notes=[*result.notes, *notes])


# ---------------------------------------------------------------------------------------------
# What was graded, and the record of it
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ClassStatus:
    """How far a class's grading is: the learners graded as their submissions stand, those among them
    whose notebook could not be graded (with the reason; they have their grade, often 0), and those not
    graded (with why: never graded, handed in again since, graded with other tests)."""

    assignment: str
    graded: tuple[str, ...]
    failed: tuple[tuple[str, str], ...]
    not_graded: tuple[tuple[str, str], ...]

    @property
    def complete(self) -> bool:
        return not self.not_graded

    def lines(self) -> list[str]:
        from .escapes import visible

        submitted = len(self.graded) + len(self.not_graded)
        lines = [f"{self.assignment}: {submitted} learners submitted, {len(self.graded)} graded, "
                 f"{len(self.not_graded)} not graded" + ("" if self.not_graded else " (the class is complete)")]
        lines += [f"  not graded: {learner} ({visible(why)[:300]})" for learner, why in self.not_graded]
        lines += [f"  graded, but the notebook could not be graded: {learner} ({visible(why)[:300]})"
                  for learner, why in self.failed]
        return lines


@dataclasses.dataclass(frozen=True)
class SubmissionKey:
    """What identifies one grading of one submission: what was handed in, and with which tests."""

    submission: str
    grader: str
    timestamp: str | None = None
    secret: str | None = None


def grader_digest(assignment: Assignment, source_nb) -> str:
    """The instructor's graded cells and points, and the course secret the hidden cases come from: a
    submission is graded again when either changes."""
    cells = [(c.source, c.metadata.get("nbgrader", {}).get("points")) for c in source_nb.cells
             if c.metadata.get("nbgrader", {}).get("grade")]
    graded_with = [assignment.name, assignment.notebook, cells, course_secret.fingerprint()]
    return hashlib.sha256(json.dumps(graded_with).encode()).hexdigest()


def small_file(path: Path | None, limit: int) -> str | None:
    """A short text file of the submission's folder (the learner's: it may be a link, a folder, or
    huge), or None."""
    if path is None or path.is_symlink() or not path.is_file():
        return None
    try:
        with path.open("rb") as f:
            raw = f.read(limit + 1)
    except OSError:
        return None
    if len(raw) > limit:
        return None
    content = raw.decode("utf-8", "replace")
    return content if content.strip().isprintable() else None


def submission_key(submission: Submission, grader: str, max_bytes: int) -> SubmissionKey:
    digest = hashlib.sha256()
    folder = submission.path.parent if submission.path else None
    timestamp = small_file(folder / TIMESTAMP, 100) if folder else None
    secret = small_file(folder / SUBMISSION_SECRET, 256) if folder else None
    if secret is not None and not all(c in "0123456789abcdefABCDEF" for c in secret):
        secret = None  # nbgrader writes hex; anything else would name a file where it must not
    digest.update((timestamp or "").strip().encode() + b"\0")
    if submission.path is None:
        digest.update(b"rejected\0" + (submission.rejected or "").encode())
    else:
        try:
            stat = submission.path.lstat()
            if stat.st_size > max_bytes or submission.path.is_symlink():
                digest.update(f"unread\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
            else:
                digest.update(submission.path.read_bytes())
        except OSError as exc:
            digest.update(f"unreadable\0{exc.strerror}".encode())
    return SubmissionKey(digest.hexdigest(), grader, timestamp.strip() if timestamp else None, secret)


def to_dict(result: Result) -> dict:
    data = dataclasses.asdict(result)
    data["path"] = str(result.path) if result.path else None
    return data


def from_dict(data: dict) -> Result:
    """A stored Result; fields it lacks take their defaults, fields this version does not know are left out."""
    outcome_fields = {f.name for f in dataclasses.fields(TestOutcome)}
    result_fields = {f.name for f in dataclasses.fields(Result)}
    values = {k: v for k, v in data.items() if k in result_fields}
    values["outcomes"] = [TestOutcome(**{k: v for k, v in o.items() if k in outcome_fields}) for o in data.get("outcomes", [])]
    values["path"] = Path(values["path"]) if values.get("path") else None
    return Result(**values)


@dataclasses.dataclass(frozen=True)
class Record:
    """The course's record of one graded submission."""

    learner: str
    submission: str
    grader: str
    timestamp: str | None
    secret: str | None
    graded_at: datetime
    result: Result

    @classmethod
    def from_row(cls, row) -> Record:
        return cls(row["learner"], row["submission"], row["grader"], row["timestamp"], row["secret"],
                   row["graded_at"], from_dict(json.loads(row["result"])))

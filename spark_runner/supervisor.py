"""The server's Spark session, replaceable: a JVM that stopped is noticed and a new session started.

Services (`LoadService`, `SqlExecutor`, `Compactor`, group commit, routine and broker loads) hold one
`SparkHandle` where they would hold a SparkSession. The handle is a stand-in that forwards every attribute
to the current session, so no service keeps a session of its own and none has to be told when the
session is replaced. A watcher thread checks the JVM process (a `waitpid`, no Py4J call); when it has
exited (an out-of-memory exit, see `session.with_fixed_heap`, or a kill) the handle reports the backend
down, every Spark access fails at once with Doris's SERVICE_UNAVAILABLE instead of a Py4J connection
error, and a new session is built with the same master and settings. Nothing durable lives in the JVM:
acknowledged loads are in Iceberg and the transaction table, and a load the JVM took down with it fails
(its transaction aborts and its files are removed), so replacing the JVM loses nothing.

A session can also be lost with its JVM running: on a cluster, the master may stop the application or
forget it (a restart). A `probe` (`spark_runner.cluster.ExecutorWatch`) names such a loss; the handle then
stops the JVM itself, and the same replacement follows.

A JVM can also be wedged: a Spark call whose jobs were cancelled (a load past its `timeout`, a statement past
`query_timeout`) that still has not returned `WEDGED_AFTER_S` later holds a thread its cancel cannot stop (a
task in code that never looks at its interrupt, such as a backtracking regex, or the driver's optimizer folding
one), and every later job may wait for its task slot. Callers register such calls (`overdue`); the watcher stops
the JVM when one is past the bound, and the same replacement follows: an outage of one restart, not a wedge.
"""

from __future__ import annotations

import faulthandler
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tables.errors import ServiceUnavailable

if TYPE_CHECKING:
    from subprocess import Popen

    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Doris's FE texts when no backend is alive (SystemInfoService)
NO_BACKEND_FOR_LOAD = "No backend available for load, please check the status of your backends."
NO_BACKEND_FOR_QUERY = "No backend available as scan node, please check the status of your backends."

# pyspark keeps the gateway, the context and the default session in class attributes: one restart at a time
_RESTART_LOCK = threading.Lock()

WEDGED_AFTER_S = 60.0  # a cancelled Spark call not returned by then is wedged (SL_SPARK_WEDGED_AFTER_SECONDS)


class Overdue:
    """Spark calls whose jobs were cancelled and that have not returned yet, each with when it was cancelled."""

    def __init__(self) -> None:
        self._since: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    def cancelled(self, key: str, what: str) -> None:
        """The call `key` (`what` names it in the log) had its jobs cancelled now; the first cancel counts."""
        with self._lock:
            self._since.setdefault(key, (time.monotonic(), what))

    def returned(self, key: str) -> None:
        """The call `key` has returned (or never was cancelled)."""
        with self._lock:
            self._since.pop(key, None)

    def wedged(self, after: float) -> str | None:
        """Why the JVM is wedged: the oldest call cancelled more than `after` seconds ago; None if there is none."""
        now = time.monotonic()
        with self._lock:
            late = [(since, what) for since, what in self._since.values() if now - since > after]
        if not late:
            return None
        since, what = min(late)
        return f"{what} was cancelled {now - since:.0f} s ago and its Spark call has not returned"

    def clear(self) -> None:
        """Forget every call (their JVM is gone: they fail and return on their own)."""
        with self._lock:
            self._since.clear()


overdue = Overdue()  # the process's one JVM: loads and statements register their cancelled calls here


class SparkHandle:
    """A stand-in for the process's SparkSession that always forwards to the current one.

    `build` makes a new session (the server's master and Spark settings); the handle calls it when the
    JVM of the current one has exited. Typed code receives the handle as a `SparkSession`
    (`typing.cast` at the one place services are built): it has the same attributes.
    """

    def __init__(
        self,
        session: SparkSession,
        build: Callable[[], SparkSession],
        *,
        probe: Callable[[SparkSession], str | None] | None = None,
        probe_interval: float = 2.0,
        wedged_after: float = WEDGED_AFTER_S,
    ) -> None:
        self._session: SparkSession | None = session
        self._build = build
        self._probe = probe
        self._probe_interval = probe_interval
        self._wedged_after = wedged_after
        self._probed = time.monotonic()
        self._proc = _jvm_process()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    def __getattr__(self, name: str) -> Any:
        # only names the handle itself lacks reach here: everything a SparkSession has. Protocol probes
        # (`copy`, `pickle`, `hasattr(x, "__...__")`) get their usual AttributeError, even while the JVM is down.
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.current(), name)

    def current(self) -> SparkSession:
        """The live session.

        Raises:
            ServiceUnavailable: the JVM has stopped and a new one is not running yet.
        """
        session = self._session
        if session is None or not self.alive:
            raise ServiceUnavailable(NO_BACKEND_FOR_QUERY)
        return session

    @property
    def alive(self) -> bool:
        """Whether the JVM of the current session is running (a session adopted without one counts as alive)."""
        return self._session is not None and (self._proc is None or self._proc.poll() is None)

    def stopped(self, wait: float = 0.0) -> bool:
        """Whether the JVM has stopped, waiting up to `wait` seconds for it to finish exiting: a Py4J
        connection error comes as the JVM closes its sockets, a moment before its process is gone."""
        proc = self._proc
        if self._session is None:
            return True
        if proc is None:
            return False
        deadline = time.monotonic() + wait
        while proc.poll() is None:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def watch(self, interval: float = 0.5) -> None:
        """Start the thread that replaces the session when its JVM has stopped."""
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, args=(interval,), name="spark-watch", daemon=True)
            self._watcher.start()

    def close(self) -> None:
        """Stop watching (the session itself ends with the process)."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
            self._watcher = None

    def _watch(self, interval: float) -> None:
        while not self._stop.wait(interval):
            if self.alive:
                if (reason := self._lost()) is not None:
                    log.error("the Spark session is lost: %s; stopping its JVM", reason)
                elif (reason := self._wedged()) is not None:
                    log.error("the Spark JVM is wedged: %s; stopping it", reason)
                else:
                    continue
                self.abandon()
            try:
                self.restart()
            except Exception:  # the watcher must outlive a failed start: it tries again next round
                log.exception("could not start a new Spark session; retrying")
                self._stop.wait(5.0)

    def _lost(self) -> str | None:
        """The probe's reason the live session is lost, at most every `probe_interval` seconds; None if it is not
        (or there is no probe, or no JVM of the handle's own to stop)."""
        session, proc = self._session, self._proc
        if self._probe is None or session is None or proc is None:
            return None
        if time.monotonic() - self._probed < self._probe_interval:
            return None
        self._probed = time.monotonic()
        try:
            return self._probe(session)
        except Exception:  # a JVM on its way down: the process check sees it next round
            log.debug("the Spark session probe failed", exc_info=True)
            return None

    def _wedged(self) -> str | None:
        """`overdue`'s reason, for a JVM of the handle's own (one it can stop and start again)."""
        if self._proc is None or self._wedged_after <= 0:
            return None
        return overdue.wedged(self._wedged_after)

    def abandon(self) -> None:
        """Stop the current session's JVM (a session whose cluster lost it): the watcher builds a new one."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)

    def restart(self) -> None:
        """Drop the stopped session and build a new one (or adopt one another handle of this process built)."""
        with _RESTART_LOCK:
            if self.alive:
                return
            code = self._proc.poll() if self._proc is not None else None
            log.error("the Spark JVM stopped (exit code %s); starting a new Spark session", code)
            self._session = None
            adopted = _live_default_session()
            if adopted is None:
                _forget_stopped_session()
                started = time.monotonic()
                # a start that hangs must be diagnosable: every thread's stack goes to the log after 60 s
                faulthandler.dump_traceback_later(60, exit=False)
                try:
                    adopted = self._build()
                finally:
                    faulthandler.cancel_dump_traceback_later()
                log.warning("new Spark session ready in %.1f s", time.monotonic() - started)
            self._proc = _jvm_process()
            self._session = adopted
            overdue.clear()  # the calls of the JVM that stopped have failed (or will, at their next Py4J read)


def backend_stopped(spark: SparkSession, wait: float = 1.0) -> bool:
    """Whether `spark` is a handle whose JVM has stopped (a plain session is never reported stopped)."""
    return isinstance(spark, SparkHandle) and spark.stopped(wait)


def _jvm_process() -> Popen[bytes] | None:
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    return getattr(gateway, "proc", None) if gateway is not None else None


def _live_default_session() -> SparkSession | None:
    """The process's current default session, if its JVM runs (another handle already replaced it)."""
    from pyspark.sql import SparkSession

    session = SparkSession._instantiatedSession
    proc = _jvm_process()
    if session is None or proc is None or proc.poll() is not None:
        return None
    return session


def _forget_stopped_session() -> None:
    """Clear pyspark's process-wide state of a session whose JVM is gone, so a new gateway is launched.

    `SparkSession.stop` would call into the dead JVM; this is its Python half.
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession, SQLContext

    gateway = SparkContext._gateway
    if gateway is not None:
        # the callback server and the connections to the dead JVM; Py4J may block on a socket of the dead
        # JVM or on a thread of its own: the new session must not wait for it
        closing = threading.Thread(target=_close_gateway, args=(gateway,), name="spark-gateway-close", daemon=True)
        closing.start()
        closing.join(timeout=10)
        if closing.is_alive():
            log.warning("closing the stopped Py4J gateway did not finish in 10 s; left to finish on its own")
        proc = getattr(gateway, "proc", None)
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()
    context = SparkContext._active_spark_context
    if context is not None:
        accumulators = getattr(context, "_accumulatorServer", None)
        if accumulators is not None:
            accumulators.shutdown()
    SparkContext._active_spark_context = None
    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    SQLContext._instantiatedContext = None


def _close_gateway(gateway: Any) -> None:
    try:
        gateway.shutdown()
    except Exception:  # the JVM side is gone: closing can only fail on it
        log.debug("closing the stopped gateway failed", exc_info=True)

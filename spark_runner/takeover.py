"""Several servers: a survivor resolves what a dead server left unfinished.

A server that dies (SIGKILL, its host gone) leaves, in the shared store and the shared dir: transactions it began
and did not finish (PREPARE), places in tables' version orders (`tables.versions`), acknowledged async
group-commit loads in its WAL (`<shared dir>/servers/<name>/wal`) and staged bodies. Every server looks, every
lease interval, for servers that are gone (their `server:<name>` lease expired, `tables.leases`); the first to
adopt one's lease resolves its work exactly as that server's own restart would, and hands the lease back:

    its version claims are released, so loads of other servers waiting behind them commit;
    its PREPARE transactions become VISIBLE if their snapshot committed, else ABORTED with their files removed
    (`tables.commit.recover_prepared`); two-phase loads it precommitted stay PRECOMMITTED, for any server;
    its WAL is replayed (`GroupCommitter.replay_wal`): the acknowledged async loads commit here;
    its staging dir is emptied;
    its routine-load jobs and unfinished broker-load jobs become the survivor's, and run there.

While a survivor holds the adopted lease, the dead server's own restart waits for it (`Leases.start`), so the
work is never done twice; a restart that comes first does it itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from spark_runner.group_commit import GroupCommitter
from tables.catalog import Catalog
from tables.commit import recover_prepared
from tables.leases import Leases
from tables.paths import remove_tree
from tables.transactions import PREPARE, TransactionStore
from tables.versions import SharedVersions

log = logging.getLogger(__name__)

# a group committer over a dead server's scratch dir (its WAL), with this server's settings
Committer = Callable[[Path], GroupCommitter]
# takes over a dead server's routine-load and broker-load jobs (they run here from now on); returns how many
AdoptJobs = Callable[[str], int]


class Takeover:
    """One pass: adopt and resolve every server that is gone."""

    def __init__(
        self,
        *,
        leases: Leases,
        catalog: Catalog,
        txns: TransactionStore,
        versions: SharedVersions | None,
        servers_dir: Path,
        committer: Committer,
        adopt_jobs: AdoptJobs,
    ) -> None:
        self.leases = leases
        self.catalog = catalog
        self.txns = txns
        self.versions = versions
        self.servers_dir = servers_dir
        self.committer = committer
        self.adopt_jobs = adopt_jobs

    def gone(self) -> list[str]:
        """Names of servers with something left (a WAL, staged bodies or an unfinished transaction) and no live
        lease."""
        names = {d.name for d in self.servers_dir.iterdir() if _left_over(d)} if self.servers_dir.is_dir() else set()
        names |= {t.owner for t in self.txns.in_state(PREPARE) if t.owner}
        return sorted(names - self.leases.live_servers() - {self.leases.server_name})

    def run_pass(self) -> int:
        """Resolve every server that is gone; returns how many."""
        resolved = 0
        for name in self.gone():
            if not self.leases.adopt(name):  # another survivor got there first, or it is back
                continue
            started = time.monotonic()
            try:
                self.resolve(name)
                resolved += 1
            except Exception:  # the next pass tries again (the lease is handed back below)
                log.exception("resolving the unfinished work of server %s failed", name)
            finally:
                self.leases.release(name)
            log.warning("resolved the unfinished work of server %s in %.1f s", name, time.monotonic() - started)
        return resolved

    def resolve(self, name: str) -> None:
        if self.versions is not None:
            released = self.versions.forget_holder(name)
            if released:
                log.warning("server %s is gone: released its %d places in version orders", name, released)
        visible, aborted = recover_prepared(self.catalog, self.txns, owner=name)
        if visible or aborted:
            log.warning("server %s is gone: %d of its loads made visible, %d aborted", name, visible, aborted)
        scratch = self.servers_dir / name
        if scratch.is_dir():
            replayed = self.replay(scratch)
            if replayed:
                log.warning("server %s is gone: replayed %d of its acknowledged async loads", name, replayed)
            remove_tree(scratch / "staging", [self.servers_dir])
        if adopted := self.adopt_jobs(name):
            log.warning("server %s is gone: %d of its routine-load and broker-load jobs run here now", name, adopted)

    def replay(self, scratch: Path) -> int:
        """Replay a dead server's WAL here and wait until every replayed load has committed (or been parked in
        wal/tmp after its retries); then its log segments hold nothing owed and go."""
        committer = self.committer(scratch)
        try:
            replayed = committer.replay_wal()
            while committer.backlog.size()[0] > 0:
                time.sleep(0.1)
        finally:
            committer.close()
        for segment in committer.wal_dir.glob("log_*.wal"):
            segment.unlink()
        return replayed


def _left_over(scratch: Path) -> bool:
    """A dead server's scratch dir holds work: WAL records or entries, or staged bodies."""
    wal, staging = scratch / "wal", scratch / "staging"
    if any(p.stat().st_size > 0 for p in wal.glob("log_*.wal")) or any(wal.glob("txn_*.json")):
        return True
    return staging.is_dir() and any(staging.iterdir())

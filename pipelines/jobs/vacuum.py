"""``kafkastore vacuum``: expire old snapshots of an Iceberg table and remove
files no snapshot references, after a grace period (Spark-free).

1. **Expire** the snapshots older than ``now - grace`` except: the heads of
   every branch and tag (Iceberg keeps those anyway), the newest
   ``retain_last`` snapshots of main, the snapshot carrying the table's
   current kafkastore offsets (so the next load always finds where to start,
   even after other engines committed on top of it), and the snapshots
   **awaiting validation** (:func:`awaiting_validation`): the quality gate
   (``pipelines/quality/``) moves the ``validated`` tag by walking main's
   history from the tag to the snapshot it validates and checks each load on
   its own; one expired snapshot on that walk would keep the tag where it is
   forever. ``expire_unvalidated=True`` drops that protection for tables
   nobody validates.
2. **Remove unreferenced files** under the table location: data and delete
   files, manifests, manifest lists and metadata files that neither a
   remaining snapshot nor the metadata log (nor the current metadata)
   references, and that are older than ``now - grace``. The grace period
   protects files of jobs still running (written, not yet committed) and
   readers planning on an older snapshot. A file whose age is unknown is kept.

**Safe against concurrent commits by construction.** The files are listed
first, then the table's metadata is read again from the catalog, and only a
listed file that this fresh metadata does not reference (nor its metadata log)
is deleted. A load that committed at any time before that re-read (even after
vacuum planned its expiry) has every file of its snapshot referenced, so none
is deleted; a load committing after the re-read wrote its metadata files after
the listing or within the grace period. The grace period itself cannot go
below :data:`MIN_GRACE_MS` (one hour; a shorter one is a :class:`ConfigError`,
as ``kafkastore gc`` refuses one below its floor): a load's data files are
written before its commit, and a grace shorter than the longest load would
delete the files of a load still running. Keep the grace above your longest
load.

Files of failed task attempts, of killed loads and of commits that lost a race
are exactly such unreferenced files.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kafkastore.errors import ConfigError
from kafkastore.storage import _mtime

from ..warehouse.catalog import table_fs
from ..warehouse.offsets import offsets_snapshot
from ..warehouse.snapshots import ancestry
from ..warehouse.properties import OPERATION_KEY, OPERATIONS, RUN_ID_KEY, VALIDATED_TAG
from ..spec.table_layout import DEAD_LETTERS_SUFFIX, table_name

log = logging.getLogger(__name__)

DEFAULT_GRACE_MS = 7 * 24 * 3600 * 1000    # Iceberg's default max snapshot age is 5 days
#: The shortest grace vacuum accepts: files of a load still writing (not yet committed)
#: are younger than this unless the load runs longer.
MIN_GRACE_MS = 3600 * 1000


@dataclass
class VacuumResult:
    """What vacuum did (or would do, with ``dry_run``)."""

    table: str
    expired: list[int] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)
    awaiting: list[int] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    dry_run: bool = False

    def render(self) -> str:
        verb = "would expire" if self.dry_run else "expired"
        rm = "would remove" if self.dry_run else "removed"
        waiting = f" ({len(self.awaiting)} awaiting validation)" if self.awaiting else ""
        return (f"vacuum {self.table}: {verb} {len(self.expired)} snapshot(s), kept "
                f"{len(self.kept)}{waiting}, {rm} {len(self.deleted)} unreferenced file(s)")


def _strip(url: str) -> str:
    """A path comparable between catalog URLs and fsspec listings."""
    return url.split("://", 1)[1].lstrip("/") if "://" in url else url.lstrip("/")


def referenced_files(table) -> set[str]:
    """Every file the table's metadata references (stripped of the scheme)."""
    io = table.io
    meta = table.metadata
    out = {_strip(table.metadata_location)}
    out.update(_strip(e.metadata_file) for e in meta.metadata_log)
    for stats in list(getattr(meta, "statistics", []) or []) + list(
            getattr(meta, "partition_statistics", []) or []):
        out.add(_strip(stats.statistics_path))
    for snap in meta.snapshots:
        out.add(_strip(snap.manifest_list))
        for manifest in snap.manifests(io):
            out.add(_strip(manifest.manifest_path))
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                out.add(_strip(entry.data_file.file_path))
    return out


def awaiting_validation(table) -> list[int]:
    """Ids of the snapshots of main the quality gate has yet to walk, newest first.

    With a ``validated`` tag: main's ancestry down to (not including) the tag's
    own ancestry, i.e. everything loaded after the validated rows. Without one,
    nothing is validated yet and the gate's first walk goes down to main's first
    snapshot, so all of main's ancestry waits, provided it holds a kafkastore
    load or reprocess (the only snapshots the gate validates). A dead-letter
    table (``<table>_dead_letters``) is never tagged: its snapshots written by
    the runs still awaiting validation in ``<table>`` wait with them (the gate
    reads a run's dead letters at that run's snapshot).
    """
    ident = tuple(table.name())
    if ident[-1].endswith(DEAD_LETTERS_SUFFIX):
        return _dead_letters_awaiting(table, ident[:-1] + (ident[-1][:-len(DEAD_LETTERS_SUFFIX)],))
    main = list(ancestry(table))
    if table.snapshot_by_name(VALIDATED_TAG) is None:
        loaded = any(_prop(s, OPERATION_KEY) in OPERATIONS for s in main)
        return [s.snapshot_id for s in main] if loaded else []
    done = {s.snapshot_id for s in ancestry(table, VALIDATED_TAG)}
    return [s.snapshot_id for s in main if s.snapshot_id not in done]


def _dead_letters_awaiting(dl_table, parent_ident) -> list[int]:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        parent = dl_table.catalog.load_table(parent_ident)
    except NoSuchTableError:
        return []
    waiting = set(awaiting_validation(parent))
    runs = {_prop(s, RUN_ID_KEY) for s in ancestry(parent)
            if s.snapshot_id in waiting} - {None}
    return [s.snapshot_id for s in ancestry(dl_table) if _prop(s, RUN_ID_KEY) in runs]


def _prop(snapshot, key: str) -> str | None:
    return snapshot.summary.additional_properties.get(key) if snapshot.summary else None


def _mtime_ms(info: dict) -> int | None:
    """A listed object's modification time in ms; None when the store gives none."""
    seconds = _mtime(info)
    return None if not seconds else int(seconds * 1000)


def check_grace(grace_ms: int) -> int:
    """``grace_ms`` if at least :data:`MIN_GRACE_MS`, else a one-line :class:`ConfigError`."""
    if not isinstance(grace_ms, int) or grace_ms < MIN_GRACE_MS:
        raise ConfigError(f"vacuum grace period {grace_ms} ms is below the safe floor of "
                          f"{MIN_GRACE_MS} ms (1 hour): files of loads still running would be "
                          f"deleted")
    return grace_ms


def vacuum(table, *, now_ms: int, grace_ms: int = DEFAULT_GRACE_MS, retain_last: int = 1,
           dry_run: bool = False, expire_unvalidated: bool = False) -> VacuumResult:
    """Expire and clean ``table`` (a pyiceberg table); see the module docstring.
    A dry run lists the snapshots it would expire and the files unreferenced
    now (not those only the expiring snapshots reference).
    ``expire_unvalidated``: also expire old snapshots awaiting validation (for
    tables without a quality gate; a gate can then no longer move its tag past
    them)."""
    if retain_last < 1:
        raise ConfigError(f"retain_last must be >= 1, got {retain_last}")
    check_grace(grace_ms)
    cutoff = now_ms - grace_ms
    result = VacuumResult(table_name(table.name()), dry_run=dry_run)
    protected = {ref.snapshot_id for ref in table.metadata.refs.values()}
    protected.update(s.snapshot_id for s in list(ancestry(table))[:retain_last])
    carrier = offsets_snapshot(table)
    if carrier is not None:
        protected.add(carrier.snapshot_id)
    if not expire_unvalidated:
        result.awaiting = awaiting_validation(table)
        protected.update(result.awaiting)
    expire = [s.snapshot_id for s in table.metadata.snapshots
              if s.timestamp_ms < cutoff and s.snapshot_id not in protected]
    result.expired = expire
    result.kept = [s.snapshot_id for s in table.metadata.snapshots if s.snapshot_id not in expire]
    if expire and not dry_run:
        table.maintenance.expire_snapshots().by_ids(expire).commit()
        table = table.refresh()
    fs, root = table_fs(table, table.location())
    try:
        listing = fs.find(root, detail=True)
    except FileNotFoundError:
        listing = {}
    # Read the metadata again *after* listing: whatever was committed meanwhile (a load
    # racing this vacuum) is referenced by it, so its files are kept (see the module doc).
    keep = referenced_files(table.refresh())
    for path, info in sorted(listing.items()):
        if info.get("type") == "directory" or _strip(path) in keep:
            continue
        when = _mtime_ms(info)
        if when is None or when >= cutoff:
            continue
        if not dry_run:
            fs.rm_file(path)
        result.deleted.append(path)
    return result

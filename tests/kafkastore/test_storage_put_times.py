"""Storage's upload-time bookkeeping under concurrent puts and deletes (with gc on its
own thread, a delete popped a remembered put time while a writer's put was pruning the old
ones, and the writer's flush died with "dictionary changed size during iteration" in the
100,000-commit soak)."""
from __future__ import annotations

import threading

from kafkastore.clock import Clock
from kafkastore.storage import Storage


class _Time(int):
    """A clock reading whose first comparison (inside the pruning scan of remembered put
    times) runs a delete on another thread, as gc's thread does beside a writer."""

    hook = None

    def __lt__(self, other):
        hook, _Time.hook = _Time.hook, None
        if hook is not None:
            hook()
        return int(self) < int(other)


def test_a_delete_during_a_puts_pruning_scan_never_breaks_the_put():
    storage = Storage("memory://put-times-scan", clock=Clock(wall_ms=lambda: _Time(1_000_000)))
    storage.put_many((f"d/{i}", b"x") for i in range(10_999))

    def delete_on_another_thread():
        t = threading.Thread(target=storage.delete, args=(["d/5"],))
        t.start()
        t.join(0.2)  # the delete waits for the scan (fixed) or mutates under it (the bug)

    _Time.hook = delete_on_another_thread
    storage.put("d/last", b"x")  # the 11,000th remembered put: a pruning scan
    assert _Time.hook is None  # the scan ran and the delete was tried in it
    for _ in range(100):
        if not storage.exists("d/5"):
            break
        threading.Event().wait(0.02)
    assert not storage.exists("d/5")
    assert storage.upload_time("d/last") == 1000.0

"""moto's S3 server with S3's atomic conditional writes.

S3 decides a conditional PUT (``If-None-Match: *``, ``If-Match``) atomically: of two
requests racing for one key, one succeeds and the other gets 412. moto checks the condition
and then stores the object as two steps of one handler, and serves requests on threads, so
two racing PUTs can both pass the check and both answer 200 (seen in a 30-minute fault-harness
run: two brokers were each told they wrote version N of one manifest; the second writer then
planned N+1 on the version it thought it had written). kafkastore's commit point is exactly
that race, so a test store that loses it tests nothing.

:func:`make_conditional_puts_atomic` makes moto's object-PUT handler (and the POST that
completes a multipart upload, which checks ``If-None-Match`` too) run one at a time in the
process. ``python -m tests.helpers.atomic_moto -H 127.0.0.1 -p PORT`` is ``python -m
moto.server`` with that applied.
"""
from __future__ import annotations

import functools
import threading

_lock = threading.Lock()
_patched = False

#: moto's request handlers that check a write condition and then store.
_CONDITIONAL_HANDLERS = ("put_object", "_key_response_post")


def make_conditional_puts_atomic() -> None:
    """Serialize moto's object writes in this process (idempotent)."""
    global _patched
    with _lock:
        if _patched:
            return
        from moto.s3.responses import S3Response

        for name in _CONDITIONAL_HANDLERS:
            original = getattr(S3Response, name)

            @functools.wraps(original)
            def serialized(self, *args, _original=original, **kwargs):
                with _lock:
                    return _original(self, *args, **kwargs)

            setattr(S3Response, name, serialized)
        _patched = True


def main(argv: list[str] | None = None) -> None:
    """``moto.server``'s command line, with atomic conditional writes."""
    make_conditional_puts_atomic()
    from moto.server import main as moto_main

    moto_main(argv)


if __name__ == "__main__":
    main()

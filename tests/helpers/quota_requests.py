"""DescribeClientQuotas / AlterClientQuotas and any request with a chosen client id over a
raw connection (tests/protocol/wire.py's ``Wire``)."""
from __future__ import annotations

from kio.schema.alter_client_quotas.v1 import request as alter_req
from kio.schema.describe_client_quotas.v1 import request as describe_req

from kafkastore.protocol.wire import codec


def call_as(w, entity, client_id: str):
    """Send ``entity`` on ``w`` with header client id ``client_id``; its decoded response."""
    w.correlation += 1
    w.sock.sendall(codec.encode_request(entity, w.correlation, client_id=client_id))
    frame = w.recv_frame()
    _, response = codec.decode_response(frame, type(entity).__api_key__, type(entity).__version__)
    return response


def alter_quotas(w, entity: dict, ops: dict, *, validate_only=False, req=alter_req):
    """One AlterClientQuotas entry: ``ops`` maps a key to a value, or to None to remove it.
    Returns ``(error code, error message)``."""
    entry = req.EntryData(
        entity=tuple(req.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()),
        ops=tuple(req.OpData(key=k, value=float(v or 0), remove=v is None) for k, v in ops.items()))
    r = w.call(req.AlterClientQuotasRequest(entries=(entry,), validate_only=validate_only))
    return int(r.entries[0].error_code), r.entries[0].error_message


def describe_quotas(w, components, strict=False, req=describe_req):
    """DescribeClientQuotas with ``(entity type, match type, name)`` components: ``(0,
    {entity as sorted (type, name) pairs: {key: value}})`` or ``(error code, message)``."""
    r = w.call(req.DescribeClientQuotasRequest(components=tuple(
        req.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components),
        strict=strict))
    if int(r.error_code):
        return int(r.error_code), r.error_message
    return 0, {tuple((e.entity_type, e.entity_name) for e in entry.entity):
               {v.key: v.value for v in entry.values} for entry in r.entries}

"""How a physical plan is written for the core: through a twin of the user's session that
carries our codec (lakehouse and kept tables' scans, recursive queries, unbounded tables'
scans, partial sorts), which ``ctx`` itself never sees."""

from __future__ import annotations

import threading

from datafusion import ExecutionPlan, SessionContext

from datafusion_distributed_py import _internal
from datafusion_distributed_py.plan_facts import PhysicalFacts

#: The id under which our leaves are encoded.
WIRE_CODEC_ID = _internal.WIRE_CODEC_ID


class Wire:
    """The twin session plans are serialised through, and its codec.

    Example:
        >>> from datafusion import SessionContext
        >>> from datafusion_distributed_py.plan_facts import physical_facts
        >>> ctx = SessionContext()
        >>> wire = Wire(ctx)
        >>> plan = ctx.sql("SELECT 1 AS x").execution_plan()
        >>> data, session = wire.serialise(plan, ctx, physical_facts(plan), [])
        >>> session is ctx and len(data) > 0
        True
    """

    def __init__(self, ctx: SessionContext) -> None:
        self.codec = _internal.WireCodec(ctx)
        self.session = ctx.with_physical_extension_codec(self.codec, codec_id=WIRE_CODEC_ID)
        # One serialisation at a time reads what was announced to the codec for it.
        self._lock = threading.Lock()

    def serialise(
        self,
        physical: ExecutionPlan,
        ctx: SessionContext,
        facts: PhysicalFacts,
        streams: list[str],
    ) -> tuple[bytes, SessionContext]:
        """``physical`` as bytes, and the session they were written through: the twin when
        the plan holds a node only our codec writes (``facts`` tells), else ``ctx``. Raises
        what datafusion raises for a node no codec can write."""
        if not (
            facts.recursive_queries or facts.reads_our_leaves or streams or facts.partial_sorts
        ):
            return physical.to_bytes(ctx), ctx
        with self._lock:
            self.codec.announce_recursive_queries(facts.recursive_queries)
            self.codec.announce_streams(streams, next(iter(facts.stream_scans), None))
            self.codec.announce_partial_sorts(facts.partial_sorts)
            try:
                return physical.to_bytes(self.session), self.session
            finally:  # announced for this plan only
                self.codec.announce_streams([], None)
                self.codec.announce_partial_sorts([])

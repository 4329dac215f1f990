-- The W3C trace context (traceparent, then a space and the tracestate if
-- any) of the span that submitted each task and that published each
-- session message, so that the scheduler, agents, supervisor and
-- consumers of any process continue the same trace. '' when tracing is
-- off: untraced tasks and messages pay only the empty column.
ALTER TABLE tasks ADD COLUMN trace_context TEXT NOT NULL DEFAULT '';
ALTER TABLE queue_messages ADD COLUMN trace_context TEXT NOT NULL DEFAULT '';

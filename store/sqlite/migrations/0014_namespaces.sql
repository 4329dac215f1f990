-- The namespace of each event (drovertype.NamespaceOf its subject; '': the
-- default namespace, so every event before this migration is the default
-- namespace's), for a namespace's event feeds. Only other namespaces'
-- events are indexed: the default namespace's feed reads by ID as before,
-- and a store without namespaces pays nothing more per event.
ALTER TABLE events ADD COLUMN namespace TEXT NOT NULL DEFAULT '';
CREATE INDEX events_namespace ON events (namespace, id) WHERE namespace <> '';

-- Console sessions signed out before they expire: a copy of the session's
-- cookie is refused until then. A sign-out deletes the expired ones.
CREATE TABLE console_signouts (
    session_id TEXT    PRIMARY KEY,
    expires_at INTEGER NOT NULL
);
CREATE INDEX console_signouts_expiry ON console_signouts (expires_at);

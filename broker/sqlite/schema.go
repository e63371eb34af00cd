package sqlite

// migrations are applied in order; migrations[i] is schema version i+1. Never edit a
// released migration: append a new one.
var migrations = []string{
	// 1: the initial schema.
	`CREATE TABLE sessions (
		id          TEXT PRIMARY KEY,
		owner       TEXT NOT NULL,
		created     BIGINT NOT NULL,
		interpreter TEXT NOT NULL DEFAULT '',
		base        TEXT NOT NULL DEFAULT '',
		base_lock   BLOB
	);
	CREATE INDEX sessions_owner ON sessions (owner, created);
	CREATE TABLE tokens (
		hash    TEXT PRIMARY KEY,
		role    TEXT NOT NULL CHECK (role IN ('admin', 'owner', 'agent')),
		subject TEXT NOT NULL,
		created BIGINT NOT NULL
	);
	CREATE TABLE requests (
		id         TEXT PRIMARY KEY,
		session_id TEXT NOT NULL REFERENCES sessions (id),
		specs      TEXT NOT NULL,
		upload     TEXT NOT NULL,
		state      TEXT NOT NULL,
		decision   TEXT NOT NULL,
		reasons    TEXT NOT NULL,
		isolated   INTEGER NOT NULL,
		packages   TEXT NOT NULL,
		lock_key   TEXT NOT NULL,
		digest     TEXT NOT NULL,
		error      TEXT NOT NULL,
		approver   TEXT NOT NULL,
		created    BIGINT NOT NULL,
		updated    BIGINT NOT NULL
	);
	CREATE INDEX requests_state ON requests (state, created);
	CREATE INDEX requests_session ON requests (session_id, created);
	CREATE TABLE bindings (
		seq        INTEGER PRIMARY KEY AUTOINCREMENT,
		session_id TEXT NOT NULL REFERENCES sessions (id),
		kind       TEXT NOT NULL CHECK (kind IN ('ext', 'iso')),
		digest     TEXT NOT NULL,
		ref        TEXT NOT NULL,
		request_id TEXT NOT NULL,
		created    BIGINT NOT NULL
	);
	CREATE INDEX bindings_session ON bindings (session_id, seq);
	CREATE TABLE audit (
		id         INTEGER PRIMARY KEY AUTOINCREMENT,
		time       BIGINT NOT NULL,
		actor      TEXT NOT NULL,
		action     TEXT NOT NULL,
		session_id TEXT NOT NULL,
		request_id TEXT NOT NULL,
		packages   TEXT NOT NULL,
		decision   TEXT NOT NULL,
		detail     TEXT NOT NULL
	);
	CREATE INDEX audit_session ON audit (session_id, id);
	CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
	BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
	CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
	BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;`,
	// 2: build leases: who builds a request until when, and named leases (one per layer).
	// Requests left building by an older pylayer have no holder and an expired lease.
	`ALTER TABLE requests ADD COLUMN lease_holder TEXT NOT NULL DEFAULT '';
	ALTER TABLE requests ADD COLUMN lease_until BIGINT NOT NULL DEFAULT 0;
	CREATE TABLE leases (
		name   TEXT PRIMARY KEY,
		holder TEXT NOT NULL,
		until  BIGINT NOT NULL
	);`,
	// 3: paged, filtered lists: an index for each filter, ending in the keyset order;
	// and audit retention: events older than the audit_horizon may be deleted (by
	// PruneAudit), the horizon only moves forward, and every other event stays.
	`DROP INDEX sessions_owner;
	CREATE INDEX sessions_owner ON sessions (owner, created, id);
	CREATE INDEX sessions_created ON sessions (created, id);
	DROP INDEX requests_state;
	CREATE INDEX requests_state ON requests (state, created, id);
	DROP INDEX requests_session;
	CREATE INDEX requests_session ON requests (session_id, created, id);
	CREATE INDEX requests_created ON requests (created, id);
	CREATE INDEX requests_updated ON requests (updated);
	CREATE INDEX audit_action ON audit (action, id);
	CREATE INDEX audit_time ON audit (time);
	CREATE TABLE audit_horizon (cutoff BIGINT NOT NULL);
	INSERT INTO audit_horizon (cutoff) VALUES (0);
	CREATE TRIGGER audit_horizon_forward BEFORE UPDATE ON audit_horizon WHEN NEW.cutoff < OLD.cutoff
	BEGIN SELECT RAISE(ABORT, 'the audit horizon only moves forward'); END;
	CREATE TRIGGER audit_horizon_no_delete BEFORE DELETE ON audit_horizon
	BEGIN SELECT RAISE(ABORT, 'the audit horizon only moves forward'); END;
	DROP TRIGGER audit_no_delete;
	CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit WHEN OLD.time >= (SELECT cutoff FROM audit_horizon)
	BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;`,
	// 4: a version per session that moves with everything GET env shows (the session's
	// base, its bindings, its requests' public state), so a broker can serve env from
	// memory while the version it reads with the session is the one it holds.
	`ALTER TABLE sessions ADD COLUMN version BIGINT NOT NULL DEFAULT 0;
	CREATE TRIGGER sessions_version AFTER UPDATE OF interpreter, base, base_lock ON sessions
	BEGIN UPDATE sessions SET version = version + 1 WHERE id = NEW.id; END;
	CREATE TRIGGER requests_version_insert AFTER INSERT ON requests
	BEGIN UPDATE sessions SET version = version + 1 WHERE id = NEW.session_id; END;
	CREATE TRIGGER requests_version_update AFTER UPDATE OF state, updated ON requests
	BEGIN UPDATE sessions SET version = version + 1 WHERE id IN (OLD.session_id, NEW.session_id); END;
	CREATE TRIGGER requests_version_delete AFTER DELETE ON requests
	BEGIN UPDATE sessions SET version = version + 1 WHERE id = OLD.session_id; END;
	CREATE TRIGGER bindings_version_insert AFTER INSERT ON bindings
	BEGIN UPDATE sessions SET version = version + 1 WHERE id = NEW.session_id; END;
	CREATE TRIGGER bindings_version_update AFTER UPDATE ON bindings
	BEGIN UPDATE sessions SET version = version + 1 WHERE id IN (OLD.session_id, NEW.session_id); END;
	CREATE TRIGGER bindings_version_delete AFTER DELETE ON bindings
	BEGIN UPDATE sessions SET version = version + 1 WHERE id = OLD.session_id; END;`,
}

// SchemaVersion is the schema version this package writes.
var SchemaVersion = len(migrations)

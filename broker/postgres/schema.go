package postgres

// migrations are applied in order; migrations[i] is schema version i+1. Never edit a
// released migration: append a new one. Text keys use the "C" collation so that ordering
// by them is bytewise, as in SQLite, whatever locale the cluster was created with.
var migrations = []string{
	// 1: the initial schema, the same tables as broker/sqlite's.
	`CREATE TABLE sessions (
		id          TEXT COLLATE "C" PRIMARY KEY,
		owner       TEXT COLLATE "C" NOT NULL,
		created     BIGINT NOT NULL,
		interpreter TEXT NOT NULL DEFAULT '',
		base        TEXT NOT NULL DEFAULT '',
		base_lock   BYTEA
	);
	CREATE INDEX sessions_owner ON sessions (owner, created);
	CREATE TABLE tokens (
		hash    TEXT COLLATE "C" PRIMARY KEY,
		role    TEXT NOT NULL CHECK (role IN ('admin', 'owner', 'agent')),
		subject TEXT NOT NULL,
		created BIGINT NOT NULL
	);
	CREATE TABLE requests (
		id         TEXT COLLATE "C" PRIMARY KEY,
		session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
		specs      TEXT NOT NULL,
		upload     TEXT NOT NULL,
		state      TEXT COLLATE "C" NOT NULL,
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
		seq        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
		kind       TEXT NOT NULL CHECK (kind IN ('ext', 'iso')),
		digest     TEXT NOT NULL,
		ref        TEXT NOT NULL,
		request_id TEXT NOT NULL,
		created    BIGINT NOT NULL
	);
	CREATE INDEX bindings_session ON bindings (session_id, seq);
	CREATE TABLE audit (
		id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		time       BIGINT NOT NULL,
		actor      TEXT NOT NULL,
		action     TEXT NOT NULL,
		session_id TEXT COLLATE "C" NOT NULL,
		request_id TEXT NOT NULL,
		packages   TEXT NOT NULL,
		decision   TEXT NOT NULL,
		detail     TEXT NOT NULL
	);
	CREATE INDEX audit_session ON audit (session_id, id);
	CREATE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN RAISE EXCEPTION 'the audit log is append-only'; END $$;
	CREATE TRIGGER audit_no_update BEFORE UPDATE OR DELETE ON audit
		FOR EACH ROW EXECUTE FUNCTION audit_append_only();
	CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
		FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();`,
	// 2: build leases: who builds a request until when, and named leases (one per layer).
	// Requests left building by an older pylayer have no holder and an expired lease.
	`ALTER TABLE requests ADD COLUMN lease_holder TEXT COLLATE "C" NOT NULL DEFAULT '';
	ALTER TABLE requests ADD COLUMN lease_until BIGINT NOT NULL DEFAULT 0;
	CREATE TABLE leases (
		name   TEXT COLLATE "C" PRIMARY KEY,
		holder TEXT COLLATE "C" NOT NULL,
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
	CREATE FUNCTION audit_horizon_forward() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF TG_OP <> 'UPDATE' OR NEW.cutoff < OLD.cutoff THEN
			RAISE EXCEPTION 'the audit horizon only moves forward';
		END IF;
		RETURN NEW;
	END $$;
	CREATE TRIGGER audit_horizon_forward BEFORE UPDATE OR DELETE ON audit_horizon
		FOR EACH ROW EXECUTE FUNCTION audit_horizon_forward();
	CREATE TRIGGER audit_horizon_no_truncate BEFORE TRUNCATE ON audit_horizon
		FOR EACH STATEMENT EXECUTE FUNCTION audit_horizon_forward();
	CREATE FUNCTION audit_prune_only() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF OLD.time >= (SELECT cutoff FROM audit_horizon) THEN
			RAISE EXCEPTION 'the audit log is append-only';
		END IF;
		RETURN OLD;
	END $$;
	DROP TRIGGER audit_no_update ON audit;
	CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
		FOR EACH ROW EXECUTE FUNCTION audit_append_only();
	CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
		FOR EACH ROW EXECUTE FUNCTION audit_prune_only();`,
	// 4: a version per session that moves with everything GET env shows (the session's
	// base, its bindings, its requests' public state), so a broker can serve env from
	// memory while the version it reads with the session is the one it holds.
	`ALTER TABLE sessions ADD COLUMN version BIGINT NOT NULL DEFAULT 0;
	CREATE FUNCTION session_version_self() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		NEW.version := OLD.version + 1;
		RETURN NEW;
	END $$;
	CREATE TRIGGER sessions_version BEFORE UPDATE OF interpreter, base, base_lock ON sessions
		FOR EACH ROW EXECUTE FUNCTION session_version_self();
	CREATE FUNCTION session_version_bump() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF TG_OP <> 'INSERT' THEN
			UPDATE sessions SET version = version + 1 WHERE id = OLD.session_id;
		END IF;
		IF TG_OP = 'INSERT' OR TG_OP = 'UPDATE' AND NEW.session_id <> OLD.session_id THEN
			UPDATE sessions SET version = version + 1 WHERE id = NEW.session_id;
		END IF;
		RETURN NULL;
	END $$;
	CREATE TRIGGER requests_version AFTER INSERT OR DELETE OR UPDATE OF state, updated ON requests
		FOR EACH ROW EXECUTE FUNCTION session_version_bump();
	CREATE TRIGGER bindings_version AFTER INSERT OR UPDATE OR DELETE ON bindings
		FOR EACH ROW EXECUTE FUNCTION session_version_bump();`,
	// 5: a statement that must change a given number of rows says so itself, so that
	// in a pipeline (sent with the statements after it, in one implicit transaction) a
	// shortfall rolls the whole batch back instead of being seen after its commit.
	`CREATE FUNCTION expect_rows(changed BIGINT, want BIGINT, what TEXT) RETURNS BIGINT LANGUAGE plpgsql AS $$
	BEGIN
		IF changed <> want THEN
			RAISE EXCEPTION '%: % of % rows changed', what, changed, want;
		END IF;
		RETURN changed;
	END $$;`,
	// 6: the session versions move once per statement and session, not once per row: a
	// group commit inserts a burst's requests and bindings in a few multi-row statements,
	// and a row trigger ran an UPDATE of sessions for each of their rows (pg_stat_statements:
	// 800 per 200-agent burst, a fifth of PostgreSQL's time). Transition tables need one
	// event per trigger and no column list, so an UPDATE of requests compares what env
	// shows (state, updated) itself.
	`DROP TRIGGER requests_version ON requests;
	DROP TRIGGER bindings_version ON bindings;
	DROP FUNCTION session_version_bump();
	CREATE FUNCTION session_versions_rows() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN -- PL/pgSQL plans a statement when it first runs it: each branch names only its own table
		IF TG_OP = 'INSERT' THEN
			UPDATE sessions SET version = version + 1 WHERE id IN (SELECT session_id FROM new_rows);
		ELSE
			UPDATE sessions SET version = version + 1 WHERE id IN (SELECT session_id FROM old_rows);
		END IF;
		RETURN NULL;
	END $$;
	CREATE FUNCTION session_versions_requests_update() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		UPDATE sessions SET version = version + 1 WHERE id IN (
			SELECT o.session_id FROM old_rows o JOIN new_rows n ON n.id = o.id
				WHERE n.state <> o.state OR n.updated <> o.updated OR n.session_id <> o.session_id
			UNION
			SELECT n.session_id FROM old_rows o JOIN new_rows n ON n.id = o.id
				WHERE n.state <> o.state OR n.updated <> o.updated OR n.session_id <> o.session_id);
		RETURN NULL;
	END $$;
	CREATE FUNCTION session_versions_bindings_update() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		UPDATE sessions SET version = version + 1 WHERE id IN (
			SELECT session_id FROM old_rows UNION SELECT session_id FROM new_rows);
		RETURN NULL;
	END $$;
	DO $$ DECLARE t TEXT; BEGIN
		FOREACH t IN ARRAY ARRAY['requests', 'bindings'] LOOP
			EXECUTE format('CREATE TRIGGER %1$s_version_insert AFTER INSERT ON %1$I
				REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION session_versions_rows()', t);
			EXECUTE format('CREATE TRIGGER %1$s_version_delete AFTER DELETE ON %1$I
				REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION session_versions_rows()', t);
			EXECUTE format('CREATE TRIGGER %1$s_version_update AFTER UPDATE ON %1$I
				REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
				FOR EACH STATEMENT EXECUTE FUNCTION session_versions_%1$s_update()', t);
		END LOOP;
	END $$;`,
}

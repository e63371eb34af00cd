// Package postgres is the broker.Store for fleets: any number of pylayer serve processes
// on one PostgreSQL database (driver: github.com/jackc/pgx/v5 through database/sql). It
// shares its SQL with broker/sqlite (broker/internal/sqlstore) and adds what a server
// database needs: row locks (SELECT ... FOR UPDATE) for read-modify-write, FOR UPDATE
// SKIP LOCKED when claiming builds, NOTIFY of every changed request with a change feed
// (Store.Follow: LISTEN on a dedicated connection, reconnecting) so that long polls on one
// replica end when another binds, and an advisory lock so that replicas starting at
// once migrate the schema one after the other. The audit table is append-only, enforced
// by triggers (UPDATE, DELETE and TRUNCATE are refused).
//
// Its tests start a real PostgreSQL (broker/postgres/pgtest). It is storage only: it must
// never import net/http or anything above broker.
package postgres

// Package sqlstore is the broker.Store that broker/sqlite and broker/postgres share: the
// same tables and the same SQL over database/sql, with a Dialect for what differs
// (placeholders, row locks, the migrations, the write check). Every change and the audit
// events that record it commit in one transaction.
//
// It is storage only: it must never import net/http or anything above broker, and only
// the store packages import it.
package sqlstore

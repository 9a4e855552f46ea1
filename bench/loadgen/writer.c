#include "writer.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int fail(writer_t *w, const char *what) {
    snprintf(w->error, sizeof w->error, "shard %s (%s:%u), %s: %s", w->shard->name,
             w->shard->host, w->shard->port, what, mysql_error(w->conn));
    return -1;
}

/* -- making a transaction ------------------------------------------------------------------- */

static int same_row(const change_t *a, const change_t *b) {
    return a->table == b->table && a->op != OP_INSERT && b->op != OP_INSERT && a->index == b->index;
}

/* Like the Python generator: a size, a first change, then candidates for distinct rows. */
static size_t make_transaction(writer_t *w) {
    size_t size = 1 + (size_t)rng_below(&w->gen.rng, (uint64_t)w->config->max_tx_rows);
    size_t count = 0;
    generator_change(&w->gen, &w->changes[count++]);
    for (size_t attempt = 0; attempt < size * 4 && count < size; attempt++) {
        change_t *candidate = &w->changes[count];
        generator_change(&w->gen, candidate);
        int repeated = 0;
        for (size_t i = 0; i < count && !repeated; i++) repeated = same_row(candidate, &w->changes[i]);
        if (!repeated) count++;
    }
    return count;
}

/* The ledger fields of one change from "table" to "keyspace_id", NUL-terminated. */
static void render_middle(writer_t *w, const change_t *c) {
    buf_t *m = &w->middles, *s = &w->scratch;
    buf_puts(m, "\"table\":\"");
    buf_puts(m, TABLE_NAMES[c->table]);
    buf_puts(m, "\",\"pk\":");
    buf_reset(s);
    row_pk_json(c->table, &c->image, s);
    buf_json_string(m, s->data, s->len);
    buf_puts(m, ",\"op\":\"");
    buf_puts(m, OP_NAMES[c->op]);
    buf_puts(m, "\",\"digest\":");
    if (c->op == OP_DELETE) {
        buf_puts(m, "null");
    } else {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int md_len = 0;
        buf_reset(s);
        row_image_json(c->table, &c->image, s);
        EVP_Digest(s->data, s->len, md, &md_len, w->config->sha256, NULL);
        buf_putc(m, '"');
        buf_hex(m, md, md_len);
        buf_putc(m, '"');
    }
    unsigned char ksid[KSID_LEN];
    row_ksid(c->table, &c->image, ksid);
    buf_puts(m, ",\"shard\":\"");
    buf_puts(m, w->shard->name);
    buf_puts(m, "\",\"keyspace_id\":\"");
    buf_hex(m, ksid, KSID_LEN);
    buf_putc(m, '"');
    buf_putc(m, '\0');
}

/* Write the gathered inserts of each table as one multi-row INSERT. */
static void flush_inserts(writer_t *w, size_t pending[T_COUNT][MAX_TX_ROWS], size_t sizes[T_COUNT],
                          long *expected, size_t *statements) {
    for (int t = 0; t < T_COUNT; t++) {
        if (!sizes[t]) continue;
        sql_insert_head((table_id)t, &w->sql);
        for (size_t j = 0; j < sizes[t]; j++) {
            if (j) buf_puts(&w->sql, ", ");
            sql_values(w->conn, (table_id)t, &w->changes[pending[t][j]].image, &w->sql);
        }
        buf_putc(&w->sql, ';');
        expected[(*statements)++] = (long)sizes[t];
        sizes[t] = 0;
    }
}

/* Append the transaction's statements and its COMMIT: inserts gathered per table and written
 * before the next update or delete (as the Python generator does); returns how many
 * statements, with the rows each must change in `expected`. */
static size_t append_sql(writer_t *w, size_t count, long *expected) {
    static __thread size_t pending[T_COUNT][MAX_TX_ROWS];
    size_t sizes[T_COUNT] = {0}, statements = 0;
    for (size_t i = 0; i < count; i++) {
        change_t *c = &w->changes[i];
        if (c->op == OP_INSERT) {
            pending[c->table][sizes[c->table]++] = i;
            continue;
        }
        flush_inserts(w, pending, sizes, expected, &statements);
        if (c->op == OP_UPDATE) sql_update(w->conn, c, &w->sql);
        else sql_delete(w->conn, c->table, &c->image, &w->sql);
        buf_putc(&w->sql, ';');
        expected[statements++] = 1;
    }
    flush_inserts(w, pending, sizes, expected, &statements);
    buf_puts(&w->sql, "COMMIT;");
    return statements;
}

/* Make the round trip's transactions. Each is applied to the writer's rows as soon as it is
 * made, so the next one builds on it (they commit in this order, in this session). */
static size_t make_round_trip(writer_t *w, size_t *rows) {
    size_t statements = 0;
    buf_reset(&w->sql);
    buf_reset(&w->middles);
    *rows = 0;
    for (int t = 0; t < w->config->pipeline; t++) {
        pending_tx_t *tx = &w->txs[t];
        size_t count = make_transaction(w);
        memset(tx, 0, sizeof *tx);
        tx->changes = count;
        tx->middles_at = w->middles.len;
        for (size_t i = 0; i < count; i++) {
            render_middle(w, &w->changes[i]);
            tx->by_op[w->changes[i].op]++;
        }
        tx->first_statement = statements;
        tx->statements = append_sql(w, count, w->expected + statements);
        statements += tx->statements + 1; /* and its COMMIT */
        generator_apply(&w->gen, w->changes, count);
        *rows += count;
    }
    w->sql.data[--w->sql.len] = '\0'; /* no ';' after the last COMMIT */
    return statements;
}

/* -- sending it ----------------------------------------------------------------------------- */

/* The GTID COMMIT's OK packet reports: the tracked `last_gtid` (name, then value). */
static void committed_gtid(MYSQL *conn, char *gtid, size_t size) {
    const char *data;
    size_t length;
    gtid[0] = '\0';
    if (mysql_session_track_get_first(conn, SESSION_TRACK_SYSTEM_VARIABLES, &data, &length) != 0)
        return;
    do {
        int is_name = length == 9 && memcmp(data, "last_gtid", 9) == 0;
        if (mysql_session_track_get_next(conn, SESSION_TRACK_SYSTEM_VARIABLES, &data, &length) != 0)
            return;
        if (is_name && length < size) {
            memcpy(gtid, data, length);
            gtid[length] = '\0';
            return;
        }
    } while (mysql_session_track_get_next(conn, SESSION_TRACK_SYSTEM_VARIABLES, &data, &length) == 0);
}

/* A committed transaction: into the ledger (the writer's clock now) and the figures. */
static int record(writer_t *w, const pending_tx_t *tx) {
    char gtid[256];
    double committed_at = wall_s();
    committed_gtid(w->conn, gtid, sizeof gtid);
    if (gtid[0] == '\0') {
        snprintf(w->error, sizeof w->error,
                 "shard %s: COMMIT's OK packet did not report last_gtid (session tracking)",
                 w->shard->name);
        return -1;
    }
    ledger_write_tx(w->config->ledger, w->middles.data + tx->middles_at, tx->changes, gtid,
                    committed_at);
    for (int op = 0; op < 3; op++) w->by_op[op] += tx->by_op[op];
    if (w->transactions == 0) w->first_commit = committed_at;
    w->last_commit = committed_at;
    w->transactions++;
    w->rows += tx->changes;
    return 0;
}

/* One round trip: every transaction's statements and COMMIT in one multi-statement query,
 * each COMMIT recorded as its OK packet is read. A statement that fails ends the run (the
 * transactions before it are committed and recorded; its own is rolled back); so does an
 * update or delete that matched no row (its COMMIT ran: it is not in the ledger, and a check
 * of the shards shows it). */
static int round_trip(writer_t *w, size_t statements) {
    if (mysql_real_query(w->conn, w->sql.data, (unsigned long)w->sql.len) != 0) {
        fail(w, "query");
        mysql_query(w->conn, "ROLLBACK");
        return -1;
    }
    size_t index = 0;
    int tx = 0, status = 0, mismatch = 0;
    do {
        if (mysql_field_count(w->conn) != 0) return fail(w, "an unexpected result set");
        const pending_tx_t *current = &w->txs[tx];
        if (index == current->first_statement + current->statements) {
            if (mismatch || record(w, current) != 0) break;
            tx++;
        } else if ((long)mysql_affected_rows(w->conn) != w->expected[index]) {
            mismatch = 1;
        }
        index++;
        status = mysql_next_result(w->conn);
    } while (status == 0);
    while (status == 0) status = mysql_next_result(w->conn); /* drain after a mismatch */
    if (status > 0) {
        fail(w, "statement");
        mysql_query(w->conn, "ROLLBACK");
        return -1;
    }
    if (mismatch)
        snprintf(w->error, sizeof w->error,
                 "shard %s: an update or delete matched no row; is another writer changing "
                 "the sample tables?", w->shard->name);
    return mismatch || w->error[0] || index != statements ? -1 : 0;
}

/* -- the thread ----------------------------------------------------------------------------- */

static int connect_shard(writer_t *w) {
    w->conn = mysql_init(NULL);
    if (w->conn == NULL) {
        snprintf(w->error, sizeof w->error, "out of memory for a connection");
        return -1;
    }
    unsigned timeout = 10;
    mysql_options(w->conn, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    mysql_options(w->conn, MYSQL_OPT_CONNECT_TIMEOUT, &timeout);
    if (mysql_real_connect(w->conn, w->shard->host, w->config->user, w->config->password,
                           w->config->database, w->shard->port, NULL,
                           CLIENT_MULTI_STATEMENTS | CLIENT_FOUND_ROWS) == NULL)
        return fail(w, "connect");
    if (mysql_query(w->conn, "SET autocommit = 0, session_track_system_variables = 'last_gtid'"))
        return fail(w, "SET autocommit and session tracking");
    return 0;
}

static void pace(writer_t *w, double *due, size_t rows) {
    if (w->rate <= 0) return;
    double now = monotonic_s();
    *due = (*due > now - 1.0 ? *due : now - 1.0) + (double)rows / w->rate;
    while (!*w->config->stopping) {
        double delay = *due - monotonic_s();
        if (delay <= 0) return;
        if (delay > 0.05) delay = 0.05; /* wake up for a stop */
        struct timespec ts = {(time_t)delay, (long)((delay - (time_t)delay) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

void *run_writer(void *arg) {
    writer_t *w = arg;
    volatile sig_atomic_t *stopping = w->config->stopping;
    if (connect_shard(w) != 0) {
        *stopping = 1;
        return NULL;
    }
    double began = monotonic_s(), due = began;
    while (!*stopping) {
        if (w->config->duration > 0 && monotonic_s() - began >= w->config->duration) break;
        size_t rows, statements = make_round_trip(w, &rows);
        if (round_trip(w, statements) != 0) {
            *stopping = 1; /* one failed writer ends the run: its figures would be wrong */
            break;
        }
        pace(w, &due, rows);
    }
    mysql_close(w->conn);
    return NULL;
}

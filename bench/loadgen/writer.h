/* One writer: a thread with one connection to one shard, the only writer of the rows it made.
 * It sends --pipeline transactions per round trip, each its own statements and COMMIT. */
#ifndef LOADGEN_WRITER_H
#define LOADGEN_WRITER_H

#include <mysql.h>
#include <openssl/evp.h>
#include <signal.h>

#include "buf.h"
#include "ledger.h"
#include "sample.h"

#define MAX_TX_ROWS 1000
#define MAX_PIPELINE 16

typedef struct {
    char name[64];
    char host[256];
    unsigned port;
    key_range_t range;
} shard_t;

/* What every writer shares: read-only once the writers run (but `stopping`). */
typedef struct {
    const char *database, *user, *password;
    int max_tx_rows, pipeline;
    double duration;
    const EVP_MD *sha256;
    ledger_t *ledger;
    volatile sig_atomic_t *stopping;
} writer_config_t;

/* A transaction of a round trip: its changes' ledger fields and its statements' row counts. */
typedef struct {
    size_t changes, first_statement, statements, middles_at;
    uint64_t by_op[3];
} pending_tx_t;

typedef struct {
    const writer_config_t *config;
    const shard_t *shard;
    generator_t gen;
    MYSQL *conn;
    double rate;
    uint64_t transactions, rows, by_op[3];
    double first_commit, last_commit;
    char error[1024];
    buf_t sql, middles, scratch;
    change_t *changes;
    pending_tx_t txs[MAX_PIPELINE];
    long expected[MAX_PIPELINE * (MAX_TX_ROWS + T_COUNT)];
} writer_t;

/* The thread's body: write until the duration ends, `*stopping` is set, or an error (then
 * `error` says what, and `*stopping` is set for every writer). */
void *run_writer(void *arg);

#endif

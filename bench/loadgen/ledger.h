/* The traffic ledger (one JSON line per committed row change), in the format of the project's
 * ledger module: order, tx, table, pk, op, digest, shard, keyspace_id, gtid, commit_time. */
#ifndef LOADGEN_LEDGER_H
#define LOADGEN_LEDGER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "buf.h"

typedef struct {
    pthread_mutex_t lock;
    FILE *fh; /* NULL: count only */
    uint64_t next_order, next_tx, entries;
    double flushed_at;
    buf_t line; /* a transaction's lines, made under the lock */
} ledger_t;

int ledger_open(ledger_t *ledger, const char *path, uint64_t first_order, uint64_t first_tx);
/* One committed transaction: `middles` holds `count` NUL-separated renderings of the fields
 * from "table" to "keyspace_id" (see loadgen.c); order and tx are numbered here, under the
 * lock, in the order transactions are recorded. */
void ledger_write_tx(ledger_t *ledger, const char *middles, size_t count, const char *gtid,
                     double commit_time);
int ledger_close(ledger_t *ledger);

#endif

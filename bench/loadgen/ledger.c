#include "ledger.h"

#include <string.h>
#include <time.h>

#define FLUSH_EVERY_S 0.2

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int ledger_open(ledger_t *ledger, const char *path, uint64_t first_order, uint64_t first_tx) {
    memset(ledger, 0, sizeof *ledger);
    pthread_mutex_init(&ledger->lock, NULL);
    buf_init(&ledger->line, 1 << 16);
    ledger->next_order = first_order;
    ledger->next_tx = first_tx;
    if (path == NULL) return 0;
    ledger->fh = fopen(path, "a");
    if (ledger->fh == NULL) return -1;
    setvbuf(ledger->fh, NULL, _IOFBF, 1 << 20);
    ledger->flushed_at = monotonic_s();
    return 0;
}

void ledger_write_tx(ledger_t *ledger, const char *middles, size_t count, const char *gtid,
                     double commit_time) {
    pthread_mutex_lock(&ledger->lock);
    uint64_t tx = ledger->next_tx++;
    const char *middle = middles;
    char tail[320];
    int tail_len = snprintf(tail, sizeof tail, ",\"gtid\":\"%s\",\"commit_time\":%.6f}\n", gtid,
                            commit_time);
    buf_reset(&ledger->line);
    for (size_t i = 0; i < count; i++) {
        size_t length = strlen(middle);
        buf_puts(&ledger->line, "{\"order\":");
        buf_u64(&ledger->line, ledger->next_order++);
        buf_puts(&ledger->line, ",\"tx\":");
        buf_u64(&ledger->line, tx);
        buf_putc(&ledger->line, ',');
        buf_put(&ledger->line, middle, length);
        buf_put(&ledger->line, tail, (size_t)tail_len);
        middle += length + 1;
    }
    if (ledger->fh != NULL) fwrite(ledger->line.data, 1, ledger->line.len, ledger->fh);
    ledger->entries += count;
    if (ledger->fh != NULL) {
        /* readers may follow the file while it grows: whole lines at least every 0.2 s */
        double now = monotonic_s();
        if (now - ledger->flushed_at >= FLUSH_EVERY_S) {
            fflush(ledger->fh);
            ledger->flushed_at = now;
        }
    }
    pthread_mutex_unlock(&ledger->lock);
}

int ledger_close(ledger_t *ledger) {
    int rc = 0;
    if (ledger->fh != NULL) {
        rc = fclose(ledger->fh);
        ledger->fh = NULL;
    }
    pthread_mutex_destroy(&ledger->lock);
    buf_free(&ledger->line);
    return rc;
}

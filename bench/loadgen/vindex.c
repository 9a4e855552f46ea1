#include "vindex.h"

/* The low-level DES API is deprecated in OpenSSL 3, where EVP offers DES only through the
 * legacy provider; the low-level calls need no provider, and DES is what the vindex is. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/des.h>
#include <string.h>
#include <xxhash.h>

/* The key schedule of the all-zero key (the zero key fails the parity check of
 * DES_set_key_checked, so it is set unchecked). Made once by vindex_init, before any thread. */
static DES_key_schedule schedule;

void vindex_init(void) {
    DES_cblock key = {0};
    DES_set_key_unchecked(&key, &schedule);
}

void hash_ksid(uint64_t value, unsigned char out[KSID_LEN]) {
    DES_cblock in;
    for (int i = 0; i < KSID_LEN; i++) in[i] = (unsigned char)(value >> (56 - 8 * i));
    DES_ecb_encrypt(&in, (DES_cblock *)out, &schedule, DES_ENCRYPT);
}

void xxhash_ksid(const char *data, size_t len, unsigned char out[KSID_LEN]) {
    uint64_t digest = XXH64(data, len, 0);
    for (int i = 0; i < KSID_LEN; i++) out[i] = (unsigned char)(digest >> (8 * i));
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int parse_bound(const char *text, size_t len, unsigned char *out, size_t *out_len) {
    if (len % 2 != 0 || len / 2 > KSID_LEN) return -1;
    for (size_t i = 0; i < len / 2; i++) {
        int high = hex_value(text[2 * i]), low = hex_value(text[2 * i + 1]);
        if (high < 0 || low < 0) return -1;
        out[i] = (unsigned char)(high << 4 | low);
    }
    *out_len = len / 2;
    /* trailing zero bytes do not change a bound: `80` and `8000` are one range */
    while (*out_len > 0 && out[*out_len - 1] == 0) (*out_len)--;
    return 0;
}

int key_range_parse(const char *text, key_range_t *out) {
    const char *dash = strchr(text, '-');
    if (dash == NULL || strchr(dash + 1, '-') != NULL) return -1;
    memset(out, 0, sizeof *out);
    if (parse_bound(text, (size_t)(dash - text), out->start, &out->start_len) != 0) return -1;
    return parse_bound(dash + 1, strlen(dash + 1), out->end, &out->end_len);
}

/* Byte-string order: the common prefix decides, else the shorter is smaller. */
static int compare(const unsigned char *a, size_t a_len, const unsigned char *b, size_t b_len) {
    size_t n = a_len < b_len ? a_len : b_len;
    int c = memcmp(a, b, n);
    if (c != 0) return c;
    return a_len < b_len ? -1 : a_len > b_len ? 1 : 0;
}

int key_range_contains(const key_range_t *range, const unsigned char ksid[KSID_LEN]) {
    if (range->start_len && compare(ksid, KSID_LEN, range->start, range->start_len) < 0) return 0;
    if (range->end_len && compare(ksid, KSID_LEN, range->end, range->end_len) >= 0) return 0;
    return 1;
}

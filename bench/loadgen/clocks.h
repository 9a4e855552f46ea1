/* The two clocks the load generator reads, in seconds: the wall clock (commit times in the
 * ledger) and the monotonic clock (durations, pacing, flush intervals). */
#ifndef LOADGEN_CLOCKS_H
#define LOADGEN_CLOCKS_H

double wall_s(void);
double monotonic_s(void);

#endif

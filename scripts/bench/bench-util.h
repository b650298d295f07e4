/*
 * Helpers shared by the benchmark's C programs (reference-guard.c,
 * rewriter.c): one clock and one MAC syntax, so that both time and parse
 * alike.
 */
#ifndef FLANNEL_GUARD_BENCH_UTIL_H
#define FLANNEL_GUARD_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds. */
static inline int64_t now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* aa:bb:cc:dd:ee:ff into 6 bytes; -1 for anything else. */
static inline int parseMac(const char* text, uint8_t mac[6]) {
  unsigned int b[6];
  char tail;
  if (sscanf(text, "%2x:%2x:%2x:%2x:%2x:%2x%c", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &tail) !=
      6)
    return -1;
  for (int i = 0; i < 6; i++) mac[i] = (uint8_t)b[i];
  return 0;
}

#endif

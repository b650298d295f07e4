/*
 * The wakeup floor of scripts/bench/wakeup-floor.ts: what one wakeup for one
 * datagram costs a process that does nothing with it.
 *
 *   wakeup -s PORT COUNT INTERVAL_US   sends COUNT one-byte UDP datagrams to
 *                                      127.0.0.1:PORT, one every INTERVAL_US
 *   wakeup -r PORT COUNT               receives COUNT of them (blocking
 *                                      recv), then prints the CPU time of the
 *                                      process from the first to the last:
 *                                      "cpu_ns N datagrams N"
 *
 * Bounded: COUNT <= 100000, INTERVAL_US <= 1 s, and the receiver gives up
 * after 10 s without a datagram (SO_RCVTIMEO).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long long cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int usage(void) {
  fprintf(stderr, "usage: wakeup -s PORT COUNT INTERVAL_US | -r PORT COUNT\n");
  return 2;
}

int main(int argc, char** argv) {
  if (argc < 4) return usage();
  const int send_mode = strcmp(argv[1], "-s") == 0;
  if (!send_mode && strcmp(argv[1], "-r") != 0) return usage();
  const long port = strtol(argv[2], NULL, 10);
  const long count = strtol(argv[3], NULL, 10);
  const long interval = send_mode && argc > 4 ? strtol(argv[4], NULL, 10) : 0;
  if (port < 1 || port > 65535 || count < 1 || count > 100000 || interval < 0 ||
      interval > 1000000 || (send_mode && argc != 5) || (!send_mode && argc != 4)) {
    return usage();
  }
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return perror("socket"), 1;
  struct sockaddr_in address = {0};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons((unsigned short)port);
  if (send_mode) {
    for (long i = 0; i < count; ++i) {
      if (sendto(fd, "x", 1, 0, (struct sockaddr*)&address, sizeof(address)) != 1) {
        return perror("sendto"), 1;
      }
      usleep((useconds_t)interval);
    }
    return 0;
  }
  if (bind(fd, (struct sockaddr*)&address, sizeof(address)) != 0) return perror("bind"), 1;
  const struct timeval timeout = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  printf("ready\n");
  fflush(stdout);
  char byte[16];
  long long first = 0;
  for (long i = 0; i < count; ++i) {
    if (recv(fd, byte, sizeof(byte), 0) < 0) return perror("recv"), 1;
    if (i == 0) first = cpu_ns();
  }
  printf("cpu_ns %lld datagrams %ld\n", cpu_ns() - first, count - 1);
  return 0;
}

// Floods the current network namespace with link notifications: flips the
// MTU of the given devices (1400 <-> 1450) with RTM_NEWLINK requests, without
// waiting for replies, at up to RATE changes per second for SECONDS seconds.
// Prints the changes made and the rate reached. Used by the flood benchmark
// and test; run it inside a test namespace (ip netns exec NS flooder ...).
//
// usage: flooder RATE SECONDS IFINDEX...
#include <errno.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double Now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct MtuRequest {
  struct nlmsghdr header;
  struct ifinfomsg info;
  struct rtattr attribute;
  unsigned int mtu;
};

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s RATE SECONDS IFINDEX...\n", argv[0]);
    return 2;
  }
  const double rate = atof(argv[1]);
  const double seconds = atof(argv[2]);
  const int count = argc - 3;
  int* indexes = calloc((size_t)count, sizeof(int));
  for (int i = 0; i < count; ++i) indexes[i] = atoi(argv[3 + i]);

  const int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) {
    perror("socket");
    return 1;
  }
  // Nothing is read back: errors would only fill the buffer, so none are asked for.
  struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
  struct MtuRequest request;
  memset(&request, 0, sizeof(request));
  request.header.nlmsg_len = sizeof(request);
  request.header.nlmsg_type = RTM_NEWLINK;
  request.header.nlmsg_flags = NLM_F_REQUEST;
  request.attribute.rta_len = RTA_LENGTH(sizeof(unsigned int));
  request.attribute.rta_type = IFLA_MTU;

  const double start = Now();
  const double end = start + seconds;
  long sent = 0;
  for (long round = 0;; ++round) {
    for (int i = 0; i < count; ++i) {
      request.header.nlmsg_seq = (unsigned)sent + 1;
      request.info.ifi_index = indexes[i];
      request.mtu = (round & 1) ? 1400 : 1450;
      if (sendto(fd, &request, sizeof(request), 0, (struct sockaddr*)&kernel, sizeof(kernel)) < 0 &&
          errno != EINTR) {
        perror("sendto");
        return 1;
      }
      ++sent;
      // Pace: never ahead of RATE.
      const double due = start + (double)sent / rate;
      double now = Now();
      while (now < due) {
        const double wait = due - now;
        if (wait > 0.0005) {
          struct timespec pause = {0, (long)(wait * 1e9)};
          nanosleep(&pause, NULL);
        }
        now = Now();
      }
      if (now >= end) {
        printf("%ld changes in %.3f s: %.0f/s\n", sent, now - start, (double)sent / (now - start));
        return 0;
      }
    }
  }
}

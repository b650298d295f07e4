// A wire between two interfaces made of userspace: every frame that arrives
// on one is read with AF_PACKET and written to the other byte for byte, as a
// NIC that never finishes a checksum left to it (CHECKSUM_PARTIAL) would put
// it on the wire. Used by the tests' relay bed; bounded by its lifetime.
//
//   wire-relay IF_A IF_B SECONDS
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

static volatile sig_atomic_t stopping = 0;
static void on_signal(int signal) {
  (void)signal;
  stopping = 1;
}

static int open_port(const char* name, int* ifindex) {
  *ifindex = (int)if_nametoindex(name);
  if (*ifindex == 0) {
    perror(name);
    exit(1);
  }
  int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
  if (fd < 0) {
    perror("socket(AF_PACKET)");
    exit(1);
  }
  // What this relay writes out of a port must not be read back from it.
  int one = 1;
  if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) != 0) {
    perror("PACKET_IGNORE_OUTGOING");
    exit(1);
  }
  struct sockaddr_ll address = {0};
  address.sll_family = AF_PACKET;
  address.sll_protocol = htons(ETH_P_ALL);
  address.sll_ifindex = *ifindex;
  if (bind(fd, (struct sockaddr*)&address, sizeof(address)) != 0) {
    perror("bind");
    exit(1);
  }
  return fd;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: wire-relay IF_A IF_B SECONDS\n");
    return 2;
  }
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  int index[2];
  int fd[2] = {open_port(argv[1], &index[0]), open_port(argv[2], &index[1])};
  const time_t end = time(NULL) + atoi(argv[3]);
  unsigned long frames[2] = {0, 0}, dropped[2] = {0, 0};
  static unsigned char frame[65536];
  printf("relaying %s <-> %s\n", argv[1], argv[2]);
  fflush(stdout);
  while (!stopping && time(NULL) < end) {
    struct pollfd wanted[2] = {{fd[0], POLLIN, 0}, {fd[1], POLLIN, 0}};
    if (poll(wanted, 2, 200) <= 0) continue;
    for (int side = 0; side < 2; side++) {
      if (!(wanted[side].revents & POLLIN)) continue;
      ssize_t length = recv(fd[side], frame, sizeof(frame), MSG_DONTWAIT);
      if (length <= 0) continue;
      struct sockaddr_ll to = {0};
      to.sll_family = AF_PACKET;
      to.sll_ifindex = index[1 - side];
      to.sll_halen = ETH_ALEN;
      memcpy(to.sll_addr, frame, ETH_ALEN);
      if (sendto(fd[1 - side], frame, (size_t)length, 0, (struct sockaddr*)&to, sizeof(to)) < 0) {
        dropped[side]++;  // larger than the MTU (a GSO frame), or a full queue
      } else {
        frames[side]++;
      }
    }
  }
  printf("%s->%s %lu frames (%lu dropped), %s->%s %lu frames (%lu dropped)\n", argv[1], argv[2],
         frames[0], dropped[0], argv[2], argv[1], frames[1], dropped[1]);
  return 0;
}

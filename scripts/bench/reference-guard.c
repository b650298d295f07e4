/*
 * A minimal C reference guard, written for the latency benchmark
 * (scripts/bench/latency.ts): the floor flannel-guard is compared with.
 *
 * One NETLINK_ROUTE socket subscribed to RTNLGRP_LINK (raw netlink, poll with
 * no timeout); one MAC pinned for one ifindex. When an RTM_NEWLINK for that
 * ifindex carries an IFLA_ADDRESS other than the pinned one, it does the work
 * flannel-guard does per correction: RTM_NEWLINK(IFLA_ADDRESS=pinned) with an
 * ACK on a second socket, then every given permanent neighbour entry back
 * with RTM_NEWNEIGH (create|replace, ACK each). Nothing else: no dump, no
 * neighbour tracking, no re-read, no output per correction.
 *
 * Usage: reference-guard [-n NETNS_PATH] [-v] [-t] IFINDEX MAC [IPV4=MAC ...]
 * Prints {"event":"ready",...} once listening, {"event":"exit",...} on
 * SIGINT/SIGTERM (exit 0). -v: one line per correction. -t: keeps, per
 * correction, CLOCK_MONOTONIC at the wake, right before the setlink write and
 * once done, and prints them at exit as `trace WAKE_NS SETLINK_NS DONE_NS`.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench-util.h"

#define MAX_NEIGHBOURS 16384
#define MAX_TRACES 1000000

struct neighbour {
  struct in_addr ip;
  uint8_t mac[6];
};

static volatile sig_atomic_t stopping;
static int ifindex;
static uint8_t pinned[6];
static struct neighbour neighbours[MAX_NEIGHBOURS];
static int neighbourCount;
static int requestFd;
static uint32_t seq = 1;
static unsigned long corrections, neighboursRestored, errorsSeen, overruns;
static int verbose;
static _Alignas(8) uint8_t buffer[65536];
static int tracing;
static int64_t (*traces)[3];
static long traceCount;
static int64_t wokeAt;

static void onSignal(int signo) {
  (void)signo;
  stopping = 1;
}

static __attribute__((noreturn)) void die(const char* what) {
  fprintf(stderr, "reference-guard: %s: %s\n", what, strerror(errno));
  exit(1);
}

static int openSocket(unsigned int group) {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) die("socket");
  struct sockaddr_nl address = {.nl_family = AF_NETLINK};
  if (bind(fd, (struct sockaddr*)&address, sizeof(address)) != 0) die("bind");
  if (group != 0 && setsockopt(fd, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, &group, sizeof(group)) != 0)
    die("NETLINK_ADD_MEMBERSHIP");
  return fd;
}

static void addAttribute(struct nlmsghdr* header, unsigned short type, const void* data,
                         size_t length) {
  struct rtattr* attribute = (struct rtattr*)((char*)header + NLMSG_ALIGN(header->nlmsg_len));
  attribute->rta_type = type;
  attribute->rta_len = (unsigned short)RTA_LENGTH(length);
  memcpy(RTA_DATA(attribute), data, length);
  header->nlmsg_len = NLMSG_ALIGN(header->nlmsg_len) + RTA_ALIGN(attribute->rta_len);
}

/* Sends a request and waits for its ACK; returns 0 or the negative errno. */
static int exchange(struct nlmsghdr* request) {
  request->nlmsg_seq = ++seq;
  struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
  if (sendto(requestFd, request, request->nlmsg_len, 0, (struct sockaddr*)&kernel, sizeof(kernel)) <
      0)
    return -errno;
  for (;;) {
    int length = (int)recv(requestFd, buffer, sizeof(buffer), 0);
    if (length < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    for (struct nlmsghdr* reply = (struct nlmsghdr*)buffer; NLMSG_OK(reply, length);
         reply = NLMSG_NEXT(reply, length)) {
      if (reply->nlmsg_seq != request->nlmsg_seq || reply->nlmsg_type != NLMSG_ERROR) continue;
      return ((struct nlmsgerr*)NLMSG_DATA(reply))->error;
    }
  }
}

static void correct(void) {
  union {
    struct nlmsghdr header;
    char bytes[256];
  } request;
  memset(&request, 0, sizeof(request));
  request.header.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
  request.header.nlmsg_type = RTM_NEWLINK;
  request.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  struct ifinfomsg* link = NLMSG_DATA(&request.header);
  link->ifi_family = AF_UNSPEC;
  link->ifi_index = ifindex;
  addAttribute(&request.header, IFLA_ADDRESS, pinned, sizeof(pinned));
  const int64_t setlinkAt = tracing ? now() : 0;
  int error = exchange(&request.header);
  if (error != 0) {
    ++errorsSeen;
    fprintf(stderr, "reference-guard: setlink: %s\n", strerror(-error));
    return;
  }
  int restored = 0;
  for (int i = 0; i < neighbourCount; i++) {
    memset(&request, 0, sizeof(request));
    request.header.nlmsg_len = NLMSG_LENGTH(sizeof(struct ndmsg));
    request.header.nlmsg_type = RTM_NEWNEIGH;
    request.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE;
    struct ndmsg* neigh = NLMSG_DATA(&request.header);
    neigh->ndm_family = AF_INET;
    neigh->ndm_ifindex = ifindex;
    neigh->ndm_state = NUD_PERMANENT;
    addAttribute(&request.header, NDA_DST, &neighbours[i].ip, sizeof(neighbours[i].ip));
    addAttribute(&request.header, NDA_LLADDR, neighbours[i].mac, sizeof(neighbours[i].mac));
    error = exchange(&request.header);
    if (error != 0) {
      ++errorsSeen;
      fprintf(stderr, "reference-guard: setneigh: %s\n", strerror(-error));
      continue;
    }
    ++restored;
  }
  ++corrections;
  neighboursRestored += (unsigned long)restored;
  if (tracing && traceCount < MAX_TRACES) {
    traces[traceCount][0] = wokeAt;
    traces[traceCount][1] = setlinkAt;
    traces[traceCount++][2] = now();
  }
  if (verbose) printf("{\"event\":\"restored\",\"neighbours\":%d}\n", restored);
}

/* The MAC in an RTM_NEWLINK for our ifindex, if it is one. */
static int linkMac(struct nlmsghdr* message, uint8_t mac[6]) {
  if (message->nlmsg_type != RTM_NEWLINK ||
      message->nlmsg_len < NLMSG_LENGTH(sizeof(struct ifinfomsg)))
    return 0;
  struct ifinfomsg* link = NLMSG_DATA(message);
  if (link->ifi_index != ifindex) return 0;
  int length = (int)IFLA_PAYLOAD(message);
  for (struct rtattr* attribute = IFLA_RTA(link); RTA_OK(attribute, length);
       attribute = RTA_NEXT(attribute, length)) {
    if (attribute->rta_type == IFLA_ADDRESS && RTA_PAYLOAD(attribute) == 6) {
      memcpy(mac, RTA_DATA(attribute), 6);
      return 1;
    }
  }
  return 0;
}

/* The current MAC by RTM_GETLINK (at start, and after lost notifications). */
static int currentMac(uint8_t mac[6]) {
  union {
    struct nlmsghdr header;
    char bytes[128];
  } request;
  memset(&request, 0, sizeof(request));
  request.header.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
  request.header.nlmsg_type = RTM_GETLINK;
  request.header.nlmsg_flags = NLM_F_REQUEST;
  request.header.nlmsg_seq = ++seq;
  ((struct ifinfomsg*)NLMSG_DATA(&request.header))->ifi_index = ifindex;
  struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
  if (sendto(requestFd, &request, request.header.nlmsg_len, 0, (struct sockaddr*)&kernel,
             sizeof(kernel)) < 0)
    die("sendto");
  for (;;) {
    int length = (int)recv(requestFd, buffer, sizeof(buffer), 0);
    if (length < 0) {
      if (errno == EINTR) continue;
      die("recv");
    }
    for (struct nlmsghdr* reply = (struct nlmsghdr*)buffer; NLMSG_OK(reply, length);
         reply = NLMSG_NEXT(reply, length)) {
      if (reply->nlmsg_seq != request.header.nlmsg_seq) continue;
      if (reply->nlmsg_type == NLMSG_ERROR) {
        errno = -((struct nlmsgerr*)NLMSG_DATA(reply))->error;
        die("getlink");
      }
      return linkMac(reply, mac);
    }
  }
}

int main(int argc, char** argv) {
  const char* netns = NULL;
  int opt;
  while ((opt = getopt(argc, argv, "n:vt")) != -1) {
    if (opt == 'n')
      netns = optarg;
    else if (opt == 'v')
      verbose = 1;
    else if (opt == 't')
      tracing = 1;
    else
      goto usage;
  }
  if (argc - optind < 2) goto usage;
  ifindex = atoi(argv[optind]);
  if (ifindex <= 0 || parseMac(argv[optind + 1], pinned) != 0) goto usage;
  for (int i = optind + 2; i < argc; i++) {
    char* separator = strchr(argv[i], '=');
    if (!separator || neighbourCount == MAX_NEIGHBOURS) goto usage;
    *separator = '\0';
    struct neighbour* entry = &neighbours[neighbourCount++];
    if (inet_pton(AF_INET, argv[i], &entry->ip) != 1 || parseMac(separator + 1, entry->mac) != 0)
      goto usage;
  }

  if (tracing && !(traces = calloc(MAX_TRACES, sizeof(*traces)))) die("calloc");
  if (netns) {
    int fd = open(netns, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) die(netns);
    close(fd);
  }
  struct sigaction action = {.sa_handler = onSignal};  // no SA_RESTART: poll returns EINTR
  sigaction(SIGINT, &action, NULL);
  sigaction(SIGTERM, &action, NULL);

  const int monitorFd = openSocket(RTNLGRP_LINK);  // subscribed before the first read
  requestFd = openSocket(0);
  uint8_t mac[6];
  if (currentMac(mac) && memcmp(mac, pinned, 6) != 0) correct();
  printf("{\"event\":\"ready\",\"ifindex\":%d,\"neighbours\":%d}\n", ifindex, neighbourCount);
  fflush(stdout);

  struct pollfd entry = {.fd = monitorFd, .events = POLLIN};
  while (!stopping) {
    if (poll(&entry, 1, -1) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (tracing) wokeAt = now();
    // Read everything queued; act on the last MAC seen for the device.
    int seen = 0, lost = 0;
    for (;;) {
      int length = (int)recv(monitorFd, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (length < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) break;
        if (errno == ENOBUFS) {
          ++overruns;
          lost = 1;
          continue;
        }
        die("recv");
      }
      for (struct nlmsghdr* message = (struct nlmsghdr*)buffer; NLMSG_OK(message, length);
           message = NLMSG_NEXT(message, length)) {
        if (linkMac(message, mac)) seen = 1;
      }
    }
    if (lost) seen = currentMac(mac);
    if (seen && memcmp(mac, pinned, 6) != 0) correct();
    if (verbose) fflush(stdout);
  }
  printf(
      "{\"event\":\"exit\",\"corrections\":%lu,\"neighboursRestored\":%lu,\"errors\":%lu,"
      "\"overruns\":%lu}\n",
      corrections, neighboursRestored, errorsSeen, overruns);
  for (long i = 0; i < traceCount; i++) {
    printf("trace %lld %lld %lld\n", (long long)traces[i][0], (long long)traces[i][1],
           (long long)traces[i][2]);
  }
  return 0;

usage:
  fprintf(stderr, "usage: reference-guard [-n NETNS_PATH] [-v] [-t] IFINDEX MAC [IPV4=MAC ...]\n");
  return 2;
}

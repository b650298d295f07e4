/*
 * The rewriter of the latency benchmark (scripts/bench/latency.ts): rewrites
 * a guarded device's MAC COUNT times and times, from its own netlink socket,
 * how long the guard takes to put it back. Written in C so that its own
 * overhead is small and the same whichever guard runs.
 *
 * Per round: a fresh foreign MAC; t0 = CLOCK_MONOTONIC right before the
 * RTM_NEWLINK(IFLA_ADDRESS=foreign) write (on a socket of its own, no ACK
 * requested: only a failure is answered). A second socket, subscribed to
 * RTNLGRP_LINK and RTNLGRP_NEIGH before the first write, sees the foreign
 * MAC, then the pinned MAC back (t1, taken right after the recv() that
 * returned it), then NEIGHBOURS distinct permanent IPv4 entries re-added on
 * the device (t2). Paced (-p US): round k starts at start + k*US (a round
 * more than US late restarts the schedule: late rounds are never fired back
 * to back, which would be three rewrites in a fight-control window); back to
 * back (-p 0): the next round starts as soon as the previous one is complete
 * and, with -g PID, the guard's main thread is asleep again (it has finished
 * the correction's tail - verification, logging, bookkeeping - so rounds do
 * not overlap; checked on /proc/PID/stat, at most 1 s), and with -G US at
 * least US after the previous rewrite (flannel-guard's fight control corrects
 * two rewrites per window at once and defers a third by ~1 s: rewrites at
 * least one window apart, issued only after the previous correction, can
 * never be three in a window).
 *
 * Usage: rewriter [-n NETNS_PATH] -i IFINDEX -m PINNED -c COUNT [-k NEIGHBOURS]
 *                 [-p INTERVAL_US] [-g GUARD_PID] [-G MIN_GAP_US] [-b] [-t TIMEOUT_MS]
 *                 [-T MAX_SECONDS] [-r RUN_TAG]
 * -b: wait for the correction by busy polling (poll with a zero timeout)
 * rather than sleeping in poll: then no notification has a sleeper to wake,
 * so the guard's writes do not pay for waking the rewriter (a cross-CPU
 * wakeup, costly in a VM), and t1/t2 carry no wakeup latency of the rewriter.
 * Prints, once done, one line per round:
 *   sample K T0_NS MAC_NS FULL_NS      (T0 absolute CLOCK_MONOTONIC; -1: not seen)
 * and a last line:
 *   summary rounds=N complete=N timeouts=N errors=N overruns=N busy=N elapsed_ns=N
 * (busy: rounds started although the guard was still running after 1 s).
 * Bounded: at most COUNT rounds, TIMEOUT_MS per round, MAX_SECONDS in all.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench-util.h"

#define MAX_NEIGHBOURS 16384
#define MAX_COUNT 1000000
/* Open addressing over destinations seen in a round; a power of two > 2 * MAX_NEIGHBOURS. */
#define SEEN_SLOTS 32768

struct sample {
  int64_t t0, mac, full;
};

static _Alignas(8) uint8_t buffer[1 << 17];
/* A destination is in the set when its slot's round is the current one: no clearing per round. */
static uint32_t seenDestination[SEEN_SLOTS];
static int seenRound[SEEN_SLOTS];

/* Adds `destination` to round `round`'s set; 0 if it was in it already. */
static int addSeen(uint32_t destination, int round) {
  for (uint32_t slot = (destination * 2654435761u) & (SEEN_SLOTS - 1);;
       slot = (slot + 1) & (SEEN_SLOTS - 1)) {
    if (seenRound[slot] != round) {
      seenRound[slot] = round;
      seenDestination[slot] = destination;
      return 1;
    }
    if (seenDestination[slot] == destination) return 0;
  }
}

static __attribute__((noreturn)) void die(const char* what) {
  fprintf(stderr, "rewriter: %s: %s\n", what, strerror(errno));
  exit(1);
}

static int openSocket(const unsigned int* groups, int groupCount, int receiveBuffer) {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
  if (fd < 0) die("socket");
  if (receiveBuffer > 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &receiveBuffer, sizeof(receiveBuffer));
  }
  struct sockaddr_nl address = {.nl_family = AF_NETLINK};
  if (bind(fd, (struct sockaddr*)&address, sizeof(address)) != 0) die("bind");
  for (int i = 0; i < groupCount; i++) {
    if (setsockopt(fd, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, &groups[i], sizeof(groups[i])) != 0)
      die("NETLINK_ADD_MEMBERSHIP");
  }
  return fd;
}

static int readFile(const char* path, char* text, size_t size) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const ssize_t length = read(fd, text, size - 1);
  close(fd);
  if (length < 0) return -1;
  text[length] = '\0';
  return (int)length;
}

/*
 * Waits (checking every ~20 us, at most 1 s) until the main thread of `pid`
 * sleeps in poll/epoll - waiting for events, not for a lock or a reply; 0 if
 * it never did. Sleeps between checks: a SCHED_FIFO rewriter that never
 * slept would be throttled by the kernel's RT bandwidth limit.
 */
static int waitAsleep(int pid) {
  char statPath[64], wchanPath[64], text[512];
  snprintf(statPath, sizeof(statPath), "/proc/%d/stat", pid);
  snprintf(wchanPath, sizeof(wchanPath), "/proc/%d/wchan", pid);
  const int64_t deadline = now() + 1000000000;
  do {
    if (readFile(statPath, text, sizeof(text)) <= 0) return 0;
    const char* end = strrchr(text, ')');
    if (end && end[1] == ' ' && end[2] == 'S' && readFile(wchanPath, text, sizeof(text)) > 0 &&
        strstr(text, "poll"))
      return 1;
    const struct timespec pause = {.tv_sec = 0, .tv_nsec = 20000};
    nanosleep(&pause, NULL);
  } while (now() < deadline);
  return 0;
}

enum state { WAIT_FOREIGN, WAIT_PINNED, WAIT_NEIGHBOURS, DONE };

int main(int argc, char** argv) {
  const char* netns = NULL;
  int ifindex = 0, count = 0, neighbours = 0, timeoutMs = 2000, maxSeconds = 600, runTag = 0;
  int guardPid = 0, spin = 0;
  long minGapUs = 0;
  long intervalUs = 0;
  uint8_t pinned[6];
  int havePinned = 0;
  int opt;
  while ((opt = getopt(argc, argv, "n:i:m:c:k:p:g:G:bt:T:r:")) != -1) {
    switch (opt) {
      case 'n':
        netns = optarg;
        break;
      case 'i':
        ifindex = atoi(optarg);
        break;
      case 'm':
        if (parseMac(optarg, pinned) != 0) goto usage;
        havePinned = 1;
        break;
      case 'c':
        count = atoi(optarg);
        break;
      case 'k':
        neighbours = atoi(optarg);
        break;
      case 'p':
        intervalUs = atol(optarg);
        break;
      case 'g':
        guardPid = atoi(optarg);
        break;
      case 'b':
        spin = 1;
        break;
      case 'G':
        minGapUs = atol(optarg);
        break;
      case 't':
        timeoutMs = atoi(optarg);
        break;
      case 'T':
        maxSeconds = atoi(optarg);
        break;
      case 'r':
        runTag = atoi(optarg) & 0xff;
        break;
      default:
        goto usage;
    }
  }
  if (ifindex <= 0 || !havePinned || count <= 0 || count > MAX_COUNT || neighbours < 0 ||
      neighbours > MAX_NEIGHBOURS || intervalUs < 0 || minGapUs < 0 || timeoutMs <= 0 ||
      maxSeconds <= 0)
    goto usage;

  if (netns) {
    int fd = open(netns, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) die(netns);
    close(fd);
  }
  const unsigned int groups[] = {RTNLGRP_LINK, RTNLGRP_NEIGH};
  /* The flush of N entries and their re-adds: 2N notifications of ~832 bytes each. */
  const int watchFd = openSocket(groups, 2, 32 << 20);
  const int writeFd = openSocket(NULL, 0, 0);
  struct sample* samples = calloc((size_t)count, sizeof(struct sample));
  if (!samples) die("calloc");

  union {
    struct nlmsghdr header;
    char bytes[128];
  } request;
  memset(&request, 0, sizeof(request));
  request.header.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
  request.header.nlmsg_type = RTM_NEWLINK;
  request.header.nlmsg_flags = NLM_F_REQUEST;
  ((struct ifinfomsg*)NLMSG_DATA(&request.header))->ifi_index = ifindex;
  struct rtattr* address =
      (struct rtattr*)((char*)&request.header + NLMSG_ALIGN(request.header.nlmsg_len));
  address->rta_type = IFLA_ADDRESS;
  address->rta_len = RTA_LENGTH(6);
  request.header.nlmsg_len = NLMSG_ALIGN(request.header.nlmsg_len) + RTA_ALIGN(address->rta_len);
  uint8_t* foreign = RTA_DATA(address);
  struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};

  int rounds = 0, complete = 0, timeouts = 0, errorsSeen = 0, overruns = 0, busy = 0;
  const int64_t start = now();
  const int64_t hardDeadline = start + (int64_t)maxSeconds * 1000000000;
  // Paced rounds keep to a schedule from `paceFrom` (round `paceRound`); one
  // that is more than an interval late (the previous correction was slow)
  // starts the schedule afresh instead of firing the late rounds back to back.
  int64_t paceFrom = start;
  int paceRound = 0;
  for (int k = 0; k < count && now() < hardDeadline; k++) {
    if (intervalUs > 0) {
      int64_t at = paceFrom + (int64_t)(k - paceRound) * intervalUs * 1000;
      if (now() > at + intervalUs * 1000) {
        paceFrom = at = now();
        paceRound = k;
      }
      struct timespec wake = {.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000};
      while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &wake, NULL) == EINTR) {
      }
    } else if (k > 0) {
      if (guardPid > 0 && !waitAsleep(guardPid)) ++busy;
      const int64_t at = samples[rounds - 1].t0 + (int64_t)minGapUs * 1000;
      struct timespec wake = {.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000};
      while (minGapUs > 0 &&
             clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &wake, NULL) == EINTR) {
      }
    }
    // Locally administered unicast, unique per round and run tag.
    foreign[0] = 0x0e;
    foreign[1] = 0xfb;
    foreign[2] = (uint8_t)runTag;
    foreign[3] = (uint8_t)(k >> 16);
    foreign[4] = (uint8_t)(k >> 8);
    foreign[5] = (uint8_t)k;
    if (memcmp(foreign, pinned, 6) == 0) foreign[2] ^= 0x80;
    request.header.nlmsg_seq = (uint32_t)k + 1;

    struct sample* sample = &samples[rounds++];
    sample->mac = sample->full = -1;
    enum state state = WAIT_FOREIGN;
    int neighboursSeen = 0;
    sample->t0 = now();
    if (sendto(writeFd, &request, request.header.nlmsg_len, 0, (struct sockaddr*)&kernel,
               sizeof(kernel)) < 0)
      die("sendto");
    const int64_t deadline = sample->t0 + (int64_t)timeoutMs * 1000000;
    while (state != DONE) {
      const int64_t left = deadline - now();
      if (left <= 0) {
        ++timeouts;
        break;
      }
      struct pollfd fds[2] = {{.fd = watchFd, .events = POLLIN}, {.fd = writeFd, .events = POLLIN}};
      const int ready = poll(fds, 2, spin ? 0 : (int)((left + 999999) / 1000000));
      if (ready < 0) {
        if (errno == EINTR) continue;
        die("poll");
      }
      if (ready == 0) continue;
      if (fds[1].revents) {  // only a failed write is answered
        int length = (int)recv(writeFd, buffer, sizeof(buffer), 0);
        for (struct nlmsghdr* reply = (struct nlmsghdr*)buffer;
             length > 0 && NLMSG_OK(reply, length); reply = NLMSG_NEXT(reply, length)) {
          const struct nlmsgerr* error = NLMSG_DATA(reply);
          if (reply->nlmsg_type == NLMSG_ERROR && error->error != 0) {
            ++errorsSeen;
            fprintf(stderr, "rewriter: round %d: setlink: %s\n", k, strerror(-error->error));
            state = DONE;
          }
        }
        if (state == DONE) break;
      }
      while (state != DONE) {
        int length = (int)recv(watchFd, buffer, sizeof(buffer), 0);
        const int64_t at = now();
        if (length < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN) break;
          if (errno == ENOBUFS) {
            ++overruns;
            continue;
          }
          die("recv");
        }
        for (struct nlmsghdr* message = (struct nlmsghdr*)buffer;
             state != DONE && NLMSG_OK(message, length); message = NLMSG_NEXT(message, length)) {
          if (message->nlmsg_type == RTM_NEWLINK &&
              message->nlmsg_len >= NLMSG_LENGTH(sizeof(struct ifinfomsg))) {
            struct ifinfomsg* link = NLMSG_DATA(message);
            if (link->ifi_index != ifindex) continue;
            int attributesLength = (int)IFLA_PAYLOAD(message);
            for (struct rtattr* attribute = IFLA_RTA(link); RTA_OK(attribute, attributesLength);
                 attribute = RTA_NEXT(attribute, attributesLength)) {
              if (attribute->rta_type != IFLA_ADDRESS || RTA_PAYLOAD(attribute) != 6) continue;
              const uint8_t* mac = RTA_DATA(attribute);
              if (state == WAIT_FOREIGN && memcmp(mac, foreign, 6) == 0) {
                state = WAIT_PINNED;
              } else if (state == WAIT_PINNED && memcmp(mac, pinned, 6) == 0) {
                sample->mac = at - sample->t0;
                state = neighbours > 0 ? WAIT_NEIGHBOURS : DONE;
                if (state == DONE) sample->full = sample->mac;
              }
            }
          } else if (message->nlmsg_type == RTM_NEWNEIGH && state == WAIT_NEIGHBOURS &&
                     message->nlmsg_len >= NLMSG_LENGTH(sizeof(struct ndmsg))) {
            struct ndmsg* neigh = NLMSG_DATA(message);
            if (neigh->ndm_ifindex != ifindex || neigh->ndm_family != AF_INET ||
                !(neigh->ndm_state & NUD_PERMANENT))
              continue;
            int attributesLength = (int)(message->nlmsg_len - NLMSG_LENGTH(sizeof(struct ndmsg)));
            for (struct rtattr* attribute =
                     (struct rtattr*)((char*)neigh + NLMSG_ALIGN(sizeof(struct ndmsg)));
                 RTA_OK(attribute, attributesLength);
                 attribute = RTA_NEXT(attribute, attributesLength)) {
              if (attribute->rta_type != NDA_DST || RTA_PAYLOAD(attribute) != 4) continue;
              uint32_t destination;
              memcpy(&destination, RTA_DATA(attribute), 4);
              if (!addSeen(destination, k + 1)) continue;
              if (++neighboursSeen >= neighbours) {
                sample->full = at - sample->t0;
                state = DONE;
              }
            }
          }
        }
      }
    }
    if (state == DONE && sample->mac >= 0) ++complete;
  }
  const int64_t elapsed = now() - start;

  for (int i = 0; i < rounds; i++) {
    printf("sample %d %lld %lld %lld\n", i, (long long)samples[i].t0, (long long)samples[i].mac,
           (long long)samples[i].full);
  }
  printf(
      "summary rounds=%d complete=%d timeouts=%d errors=%d overruns=%d busy=%d elapsed_ns=%lld\n",
      rounds, complete, timeouts, errorsSeen, overruns, busy, (long long)elapsed);
  free(samples);
  return 0;

usage:
  fprintf(stderr,
          "usage: rewriter [-n NETNS_PATH] -i IFINDEX -m PINNED -c COUNT [-k NEIGHBOURS]\n"
          "                [-p INTERVAL_US] [-g GUARD_PID] [-G MIN_GAP_US] [-b] [-t TIMEOUT_MS]\n"
          "                [-T MAX_SECONDS] [-r RUN_TAG]\n");
  return 2;
}

/*
 * bench:edge's packet generator: sends exactly COUNT small UDP datagrams to DST:PORT as fast as one
 * core can (sendmmsg, BATCH per call), then prints one JSON line: {"sent": n, "ns": elapsed, "cpu_ns":
 * this process's CPU time}. On veth the whole forwarding path runs in the sender's own softirq work, so
 * CPU time per packet is the path's cost, and it is far less moved by other work on a shared host than
 * the elapsed time is. Bounded
 * by count, so it always stops by itself. Compiled by bench/edge.ts with the system C compiler; it is
 * run only inside the benchmark's own network namespaces (never toward a real network).
 *
 *   udp-flood DST PORT COUNT PAYLOAD_BYTES
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define BATCH 256

static long long now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s DST PORT COUNT PAYLOAD_BYTES\n", argv[0]);
    return 2;
  }
  struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2]))};
  if (inet_pton(AF_INET, argv[1], &dst.sin_addr) != 1) {
    fprintf(stderr, "bad address %s\n", argv[1]);
    return 2;
  }
  long long count = atoll(argv[3]);
  size_t len = (size_t)atoi(argv[4]);
  if (count <= 0 || len > 1400) {
    fprintf(stderr, "COUNT must be positive and PAYLOAD_BYTES at most 1400\n");
    return 2;
  }
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&dst, sizeof dst) != 0) {
    perror("socket/connect");
    return 1;
  }
  static char payload[1400];
  memset(payload, 'x', sizeof payload);
  struct iovec iov = {.iov_base = payload, .iov_len = len};
  struct mmsghdr msgs[BATCH];
  memset(msgs, 0, sizeof msgs);
  for (int i = 0; i < BATCH; i++) {
    msgs[i].msg_hdr.msg_iov = &iov;
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  long long sent = 0, t0 = now_ns(CLOCK_MONOTONIC), c0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
  while (sent < count) {
    int want = count - sent < BATCH ? (int)(count - sent) : BATCH;
    int n = sendmmsg(fd, msgs, want, 0);
    if (n < 0) {
      /* A full queue or an ICMP error reported on the connected socket: not a sent packet, go on. */
      if (errno == ENOBUFS || errno == EAGAIN || errno == ECONNREFUSED || errno == EINTR) continue;
      perror("sendmmsg");
      return 1;
    }
    sent += n;
  }
  printf("{\"sent\":%lld,\"ns\":%lld,\"cpu_ns\":%lld}\n", sent, now_ns(CLOCK_MONOTONIC) - t0, now_ns(CLOCK_PROCESS_CPUTIME_ID) - c0);
  return 0;
}

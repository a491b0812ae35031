/*
 * bench:flood's attack generator: crafted IPv4 packets on a raw socket (IP_HDRINCL), so the source
 * address, TCP flags and fragment fields are the attack's own. Sends COUNT packets, or stops after
 * SECONDS, whichever comes first (so it always stops by itself), as fast as one core can (sendmmsg,
 * BATCH per call), then prints one JSON line: {"sent": n, "ns": elapsed, "cpu_ns": this process's CPU
 * time}. Compiled by bench/flood.ts with the system C compiler and run only inside the benchmark's own
 * network namespaces (never toward a real network).
 *
 *   raw-flood KIND DST DPORT COUNT SECONDS SRC SOURCES
 *
 * KIND   udp   small UDP datagrams (18 bytes of payload: 60-byte frames)
 *        syn   TCP SYNs with an MSS option, the first packet of a handshake
 *        frag  UDP fragments: every other packet a first fragment (MF set, offset 0, holding the UDP
 *              header), the others a later one (offset 1480, no MF)
 * SRC, SOURCES  sources are SRC, SRC+1, ... SRC+SOURCES-1, in turn (1: one fixed source)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define BATCH 256
#define PKT_MAX 64

static long long now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static uint32_t sum16(const void *data, size_t len, uint32_t sum) {
  const uint8_t *p = data;
  for (; len > 1; len -= 2, p += 2) sum += (uint32_t)(p[0] << 8 | p[1]);
  if (len) sum += (uint32_t)(p[0] << 8);
  return sum;
}

static uint16_t fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return htons((uint16_t)~sum);
}

/* The transport checksum over the pseudo-header (source, destination, protocol, length) and the segment. */
static uint16_t l4_checksum(uint32_t saddr, uint32_t daddr, uint8_t proto, const uint8_t *seg, size_t len) {
  uint8_t pseudo[12];
  memcpy(pseudo, &saddr, 4);
  memcpy(pseudo + 4, &daddr, 4);
  pseudo[8] = 0;
  pseudo[9] = proto;
  pseudo[10] = (uint8_t)(len >> 8);
  pseudo[11] = (uint8_t)len;
  return fold(sum16(seg, len, sum16(pseudo, sizeof pseudo, 0)));
}

enum kind { K_UDP, K_SYN, K_FRAG };

/* Packet number i into buf; answers its length. The kernel fills the IP total length and checksum. */
static size_t build(uint8_t *buf, enum kind k, long long i, uint32_t src, uint32_t dst, uint16_t dport) {
  struct iphdr *ip = (struct iphdr *)buf;
  memset(buf, 0, PKT_MAX);
  ip->version = 4;
  ip->ihl = 5;
  ip->ttl = 64;
  ip->saddr = src;
  ip->daddr = dst;
  ip->id = htons((uint16_t)(i + 1));
  uint8_t *l4 = buf + 20;
  uint16_t sport = (uint16_t)(1024 + (i % 60000));
  if (k == K_SYN) {
    ip->protocol = IPPROTO_TCP;
    uint8_t *t = l4;
    t[0] = sport >> 8, t[1] = sport & 0xff, t[2] = dport >> 8, t[3] = dport & 0xff;
    uint32_t seq = htonl((uint32_t)(i * 2654435761u));
    memcpy(t + 4, &seq, 4);
    t[12] = 6 << 4; /* data offset: 24 bytes, with the MSS option */
    t[13] = 0x02;   /* SYN */
    t[14] = 0xff, t[15] = 0xff; /* window */
    t[20] = 2, t[21] = 4, t[22] = 1460 >> 8, t[23] = 1460 & 0xff;
    uint16_t c = l4_checksum(src, dst, IPPROTO_TCP, t, 24);
    memcpy(t + 16, &c, 2);
    return 20 + 24;
  }
  ip->protocol = IPPROTO_UDP;
  if (k == K_FRAG && (i & 1)) {
    /* A later fragment: no UDP header, offset 1480 bytes (185 units of 8), the last one. */
    ip->frag_off = htons(185);
    memset(l4, 'x', 24);
    return 20 + 24;
  }
  size_t len = 8 + 18;
  if (k == K_FRAG) {
    ip->frag_off = htons(IP_MF);
    len = 8 + 16; /* a non-last fragment carries a multiple of 8 bytes */
  }
  uint8_t *u = l4;
  u[0] = sport >> 8, u[1] = sport & 0xff, u[2] = dport >> 8, u[3] = dport & 0xff;
  u[4] = (uint8_t)(len >> 8), u[5] = (uint8_t)len;
  memset(u + 8, 'x', len - 8);
  /* A first fragment's checksum would cover the whole datagram; it is never checked before reassembly. */
  if (k == K_UDP) {
    uint16_t c = l4_checksum(src, dst, IPPROTO_UDP, u, len);
    memcpy(u + 6, &c, 2);
  }
  return 20 + len;
}

int main(int argc, char **argv) {
  if (argc != 8) {
    fprintf(stderr, "usage: %s udp|syn|frag DST DPORT COUNT SECONDS SRC SOURCES\n", argv[0]);
    return 2;
  }
  enum kind k;
  if (!strcmp(argv[1], "udp")) k = K_UDP;
  else if (!strcmp(argv[1], "syn")) k = K_SYN;
  else if (!strcmp(argv[1], "frag")) k = K_FRAG;
  else {
    fprintf(stderr, "unknown kind %s\n", argv[1]);
    return 2;
  }
  struct sockaddr_in dst = {.sin_family = AF_INET};
  struct in_addr src;
  if (inet_pton(AF_INET, argv[2], &dst.sin_addr) != 1 || inet_pton(AF_INET, argv[6], &src) != 1) {
    fprintf(stderr, "bad address\n");
    return 2;
  }
  uint16_t dport = (uint16_t)atoi(argv[3]);
  long long count = atoll(argv[4]);
  double seconds = atof(argv[5]);
  long long sources = atoll(argv[7]);
  if (count <= 0 || seconds <= 0 || sources <= 0) {
    fprintf(stderr, "COUNT, SECONDS and SOURCES must be positive\n");
    return 2;
  }
  int fd = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
  if (fd < 0) {
    perror("socket");
    return 1;
  }
  static uint8_t pkts[BATCH][PKT_MAX];
  struct iovec iov[BATCH];
  struct mmsghdr msgs[BATCH];
  memset(msgs, 0, sizeof msgs);
  for (int j = 0; j < BATCH; j++) {
    iov[j].iov_base = pkts[j];
    msgs[j].msg_hdr.msg_iov = &iov[j];
    msgs[j].msg_hdr.msg_iovlen = 1;
    msgs[j].msg_hdr.msg_name = &dst;
    msgs[j].msg_hdr.msg_namelen = sizeof dst;
  }
  uint32_t src0 = ntohl(src.s_addr);
  long long sent = 0, t0 = now_ns(CLOCK_MONOTONIC), c0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
  long long deadline = t0 + (long long)(seconds * 1e9);
  while (sent < count && now_ns(CLOCK_MONOTONIC) < deadline) {
    int want = count - sent < BATCH ? (int)(count - sent) : BATCH;
    for (int j = 0; j < want; j++) {
      long long i = sent + j;
      iov[j].iov_len = build(pkts[j], k, i, htonl(src0 + (uint32_t)(i % sources)), dst.sin_addr.s_addr, dport);
    }
    int n = sendmmsg(fd, msgs, want, 0);
    if (n < 0) {
      /* A full queue: not a sent packet, go on. */
      if (errno == ENOBUFS || errno == EAGAIN || errno == EINTR) continue;
      perror("sendmmsg");
      return 1;
    }
    sent += n;
  }
  printf("{\"sent\":%lld,\"ns\":%lld,\"cpu_ns\":%lld}\n", sent, now_ns(CLOCK_MONOTONIC) - t0, now_ns(CLOCK_PROCESS_CPUTIME_ID) - c0);
  return 0;
}

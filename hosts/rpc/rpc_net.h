/* SPDX-License-Identifier: Apache-2.0
 *
 * What rpc-server and rpc-client both do to a socket and a clock.
 */
#ifndef RPC_NET_H
#define RPC_NET_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

static inline int64_t rpc_now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Write all of buf on a non-blocking socket, waiting (at most 5 s at a time) for room. */
static inline int rpc_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len) {
		ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
		if (w > 0) {
			p += w;
			len -= (size_t)w;
		} else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd pfd = {.fd = fd, .events = POLLOUT};
			if (poll(&pfd, 1, 5000) <= 0)
				return -1;
		} else if (!(w < 0 && errno == EINTR)) {
			return -1;
		}
	}
	return 0;
}

/* "A.B.C.D:PORT" into addr, the port from min_port to 65535. 0, or -1. */
static inline int rpc_parse_addr(const char *s, long min_port, struct sockaddr_in *addr)
{
	char host[64];
	const char *colon = strrchr(s, ':');
	if (!colon || (size_t)(colon - s) >= sizeof host)
		return -1;
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = '\0';
	char *end;
	long port = strtol(colon + 1, &end, 10);
	if (colon[1] == '\0' || *end != '\0' || port < min_port || port > 65535)
		return -1;
	addr->sin_family = AF_INET;
	addr->sin_port = htons((uint16_t)port);
	return inet_pton(AF_INET, host, &addr->sin_addr) == 1 ? 0 : -1;
}

#endif /* RPC_NET_H */

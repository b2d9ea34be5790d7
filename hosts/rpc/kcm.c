/* SPDX-License-Identifier: Apache-2.0
 *
 * rpc-server's KCM socket layer (kcm.h). The parser is three eBPF instructions of a
 * socket filter: r6 = ctx; r0 = the 32-bit big-endian word at offset 4 of the message
 * (LD_ABS, which KCM's strparser makes relative to the message's start, and which
 * converts to host order); r0 += RPC_HDR_LEN; exit. It is checked on this machine by
 * BPF_PROG_TEST_RUN; the KCM sockets themselves need a kernel with CONFIG_AF_KCM.
 */
#define _GNU_SOURCE
#include "kcm.h"

#include <errno.h>
#include <linux/bpf.h>
#include <linux/kcm.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "rpc_proto.h"

#ifndef AF_KCM
#define AF_KCM 41
#endif

#define KCM_FIX "run the kcm mode on hosts whose kernel has KCM (`modprobe kcm`; CONFIG_AF_KCM)"

static long sys_bpf(int cmd, union bpf_attr *attr)
{
	return syscall(SYS_bpf, cmd, attr, sizeof *attr);
}

int kcm_parser_load(char *err, size_t errlen)
{
	struct bpf_insn prog[] = {
		{.code = BPF_ALU64 | BPF_MOV | BPF_X, .dst_reg = 6, .src_reg = 1},	 /* r6 = ctx (LD_ABS's) */
		{.code = BPF_LD | BPF_ABS | BPF_W, .imm = 4},				 /* r0 = ntohl(len) */
		{.code = BPF_JMP | BPF_JGT | BPF_K, .dst_reg = 0, .off = 2, .imm = RPC_MAX_PAYLOAD},
		{.code = BPF_ALU64 | BPF_ADD | BPF_K, .dst_reg = 0, .imm = RPC_HDR_LEN}, /* + the header */
		{.code = BPF_JMP | BPF_EXIT},
		{.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = 0, .imm = -1}, /* too long: an error */
		{.code = BPF_JMP | BPF_EXIT},
	};
	static char log[4096];
	union bpf_attr a;
	memset(&a, 0, sizeof a);
	a.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
	a.insns = (uint64_t)(uintptr_t)prog;
	a.insn_cnt = sizeof prog / sizeof prog[0];
	a.license = (uint64_t)(uintptr_t) "GPL";
	a.log_buf = (uint64_t)(uintptr_t)log;
	a.log_size = sizeof log;
	a.log_level = 1;
	int fd = (int)sys_bpf(BPF_PROG_LOAD, &a);
	if (fd < 0)
		snprintf(err, errlen, "the kernel refused the KCM length parser (BPF): %s%s%s", strerror(errno),
			 log[0] ? "; verifier: " : "", log);
	return fd;
}

long kcm_parser_run(int prog, const void *msg, size_t len, char *err, size_t errlen)
{
	/* a socket filter's test run takes an Ethernet frame and starts the program after
	 * its header, where KCM starts it at the message */
	unsigned char frame[14 + 256];
	if (len > sizeof frame - 14) {
		snprintf(err, errlen, "a test message of %zu bytes: at most %zu", len, sizeof frame - 14);
		return -1;
	}
	memset(frame, 0, 14);
	frame[12] = 0x08; /* IPv4, as any: the program never looks */
	memcpy(frame + 14, msg, len);
	union bpf_attr a;
	memset(&a, 0, sizeof a);
	a.test.prog_fd = (uint32_t)prog;
	a.test.data_in = (uint64_t)(uintptr_t)frame;
	a.test.data_size_in = (uint32_t)(14 + len);
	a.test.repeat = 1;
	if (sys_bpf(BPF_PROG_TEST_RUN, &a) < 0) {
		snprintf(err, errlen, "the kernel could not test-run the KCM length parser: %s", strerror(errno));
		return -1;
	}
	return (long)a.test.retval;
}

int kcm_available(char *err, size_t errlen)
{
	int fd = socket(AF_KCM, SOCK_DGRAM | SOCK_CLOEXEC, KCMPROTO_CONNECTED);
	if (fd < 0) {
		snprintf(err, errlen, "this kernel has no KCM sockets (socket(AF_KCM): %s); fix: " KCM_FIX,
			 strerror(errno));
		return -1;
	}
	close(fd);
	return 0;
}

int kcm_open(int tcp_fd, int prog, char *err, size_t errlen)
{
	int k = socket(AF_KCM, SOCK_DGRAM | SOCK_CLOEXEC, KCMPROTO_CONNECTED);
	if (k < 0) {
		snprintf(err, errlen, "socket(AF_KCM): %s; fix: " KCM_FIX, strerror(errno));
		return -1;
	}
	struct kcm_attach at = {.fd = tcp_fd, .bpf_fd = prog};
	if (ioctl(k, SIOCKCMATTACH, &at) < 0) {
		snprintf(err, errlen, "attaching a connection to KCM: %s", strerror(errno));
		close(k);
		return -1;
	}
	return k;
}

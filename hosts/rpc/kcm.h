/* SPDX-License-Identifier: Apache-2.0
 *
 * rpc-server's KCM socket layer (kcm.c): the kernel's Connection Multiplexor delimits
 * the messages of a TCP connection with a BPF program, the length parser, and hands
 * them out whole on a KCM socket.
 */
#ifndef RPC_KCM_H
#define RPC_KCM_H

#include <stddef.h>

/* The length parser of rpc_proto.h's messages (RPC_HDR_LEN + the header's len), loaded
 * into the kernel: its fd, or -1 with the reason in err. */
int kcm_parser_load(char *err, size_t errlen);

/* The parser run by the kernel (BPF_PROG_TEST_RUN) on one message's first bytes: the
 * length it gives the message, or -1 with the reason in err. */
long kcm_parser_run(int prog, const void *msg, size_t len, char *err, size_t errlen);

/* 0 if this kernel offers AF_KCM sockets, else -1 with the reason and fix in err. */
int kcm_available(char *err, size_t errlen);

/* A KCM socket of its own multiplexor with the TCP socket tcp_fd attached (parsed by
 * prog): whole messages are read from it and answers written to it, and go out on
 * tcp_fd. The fd, or -1 with the reason in err. */
int kcm_open(int tcp_fd, int prog, char *err, size_t errlen);

#endif /* RPC_KCM_H */

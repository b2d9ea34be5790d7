/* SPDX-License-Identifier: Apache-2.0
 *
 * The synthetic RPC over TCP (Rakaia's measured layer): length-prefixed messages on a
 * byte stream, every field in network byte order.
 *
 *   request  = rpc_hdr (magic RPC_REQ) + len payload bytes
 *   response = rpc_hdr (magic RPC_RESP, len 0), id echoed, aux = the server thread
 *              that served it
 *
 * service_ns is the time the server spends on the request (already dilated by the
 * client). A message with another magic or a payload over RPC_MAX_PAYLOAD ends its
 * connection: the stream cannot be resynchronised.
 */
#ifndef RPC_PROTO_H
#define RPC_PROTO_H

#include <stdint.h>

#define RPC_REQ  0x52504331u /* "RPC1" */
#define RPC_RESP 0x52505231u /* "RPR1" */
#define RPC_MAX_PAYLOAD 65536u

struct rpc_hdr {
	uint32_t magic;
	uint32_t len;        /* payload bytes after the header */
	uint64_t id;         /* the client's, echoed */
	uint64_t service_ns; /* request: the service time asked for; response: 0 */
	uint32_t aux;        /* response: the server thread that served it */
	uint32_t pad;
} __attribute__((packed));

#define RPC_HDR_LEN ((unsigned)sizeof(struct rpc_hdr)) /* 32 */

#endif /* RPC_PROTO_H */

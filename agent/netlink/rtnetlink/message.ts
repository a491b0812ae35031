// rtnetlink's framing, shared by its four objects (link.ts, address.ts, route.ts, rule.ts): the message types,
// address families, the request flags of add / replace / change, and message(), which frames one request.
import { NlWriter } from '../attrs.ts';
import { NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST, beginMessage, endMessage } from '../message.ts';

// include/uapi/linux/rtnetlink.h: message types
export const RTM_NEWLINK = 16;
export const RTM_DELLINK = 17;
export const RTM_GETLINK = 18;
export const RTM_NEWADDR = 20;
export const RTM_DELADDR = 21;
export const RTM_GETADDR = 22;
export const RTM_NEWROUTE = 24;
export const RTM_DELROUTE = 25;
export const RTM_GETROUTE = 26;
export const RTM_NEWRULE = 32;
export const RTM_DELRULE = 33;
export const RTM_GETRULE = 34;

// include/linux/socket.h
export const AF_UNSPEC = 0;
export const AF_INET = 2;

/** Flags of a "create, fail if it exists" request (ip link/addr/route/rule add). */
export const FLAGS_CREATE = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
/** Flags of a "create or replace" request (ip route replace). */
export const FLAGS_REPLACE = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE;
/** Flags of a change or delete request. */
export const FLAGS_ACK = NLM_F_REQUEST | NLM_F_ACK;

export function message(type: number, flags: number, seq: number, body: (w: NlWriter) => void): Buffer {
  const w = new NlWriter(256);
  const start = beginMessage(w, type, flags, seq);
  body(w);
  endMessage(w, start);
  return w.toBuffer();
}

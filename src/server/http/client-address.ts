import type { Socket } from "node:net";

/**
 * The address of the client at the other end of a connection, as every
 * per-address limit sees it. Today that is the TCP peer (an IPv4-mapped IPv6
 * address written as plain IPv4, so one client has one spelling); once trusted
 * proxies are configured, this is the one place that learns to look past them.
 * "" when the socket is already closed and the peer unknown.
 */
export function clientAddressOf(socket: Socket): string {
  const address = socket.remoteAddress ?? "";
  return address.startsWith("::ffff:") && address.includes(".") ? address.slice("::ffff:".length) : address;
}

/**
 * The key per-address limits count under: an IPv4 address as it is, an IPv6
 * address by its /64 prefix, because one IPv6 subscriber is routinely given a
 * whole /64 and could otherwise open each connection from a new address.
 */
export function addressLimitKey(address: string): string {
  if (!address.includes(":")) return address;
  const [head = "", tail] = address.split("::");
  const groups = head === "" ? [] : head.split(":");
  if (tail !== undefined) {
    const rest = tail === "" ? [] : tail.split(":");
    groups.push(...Array<string>(Math.max(0, 8 - groups.length - rest.length)).fill("0"), ...rest);
  }
  return `${groups
    .slice(0, 4)
    .map((g) => g.toLowerCase().replace(/^0+(?=.)/, ""))
    .join(":")}::/64`;
}

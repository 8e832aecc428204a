// Which IP addresses a remote image fetch may connect to: public unicast only. Private, loopback,
// link-local, CGNAT, multicast, unspecified, documentation and reserved ranges are refused, in IPv4, IPv6
// and IPv4 embedded in IPv6 (mapped ::ffff:a.b.c.d, compatible ::a.b.c.d, NAT64 64:ff9b::/96).

import { isIPv4, isIPv6 } from 'node:net';

export interface IpPolicyOptions {
  /** Test only: also permit 127.0.0.0/8 and ::1. */
  allowLoopback?: boolean;
}

const V4_BLOCKED: ReadonlyArray<[number, number, string]> = [
  [0x00000000, 8, 'unspecified/"this network"'],
  [0x0a000000, 8, 'private'],
  [0x64400000, 10, 'carrier-grade NAT'],
  [0x7f000000, 8, 'loopback'],
  [0xa9fe0000, 16, 'link-local'],
  [0xac100000, 12, 'private'],
  [0xc0000000, 24, 'IETF protocol assignments'],
  [0xc0000200, 24, 'documentation'],
  [0xc0586300, 24, '6to4 relay anycast'],
  [0xc0a80000, 16, 'private'],
  [0xc6120000, 15, 'benchmarking'],
  [0xc6336400, 24, 'documentation'],
  [0xcb007100, 24, 'documentation'],
  [0xe0000000, 4, 'multicast'],
  [0xf0000000, 4, 'reserved/broadcast'],
];

function parseV4(s: string): number {
  const p = s.split('.').map(Number);
  return ((p[0] << 24) | (p[1] << 16) | (p[2] << 8) | p[3]) >>> 0;
}

function v4Verdict(addr: number, options: IpPolicyOptions): string | null {
  for (const [base, bits, what] of V4_BLOCKED) {
    const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
    if (((addr & mask) >>> 0) === base) {
      if (what === 'loopback' && options.allowLoopback) return null;
      return what;
    }
  }
  return null;
}

/** 16 bytes of an IPv6 literal (zone id stripped; may end in a dotted quad). */
export function parseV6(s: string): Uint8Array {
  const addr = s.split('%')[0];
  const out = new Uint8Array(16);
  let head = addr;
  let tail = '';
  const dbl = addr.indexOf('::');
  if (dbl >= 0) {
    head = addr.slice(0, dbl);
    tail = addr.slice(dbl + 2);
  }
  const groups = (part: string): number[] => {
    if (part === '') return [];
    const res: number[] = [];
    for (const g of part.split(':')) {
      if (g.includes('.')) {
        const v4 = parseV4(g);
        res.push(v4 >>> 16, v4 & 0xffff);
      } else {
        res.push(parseInt(g, 16));
      }
    }
    return res;
  };
  const h = groups(head);
  const t = groups(tail);
  const all = dbl >= 0 ? [...h, ...new Array<number>(8 - h.length - t.length).fill(0), ...t] : h;
  for (let i = 0; i < 8; i++) {
    out[2 * i] = (all[i] >> 8) & 0xff;
    out[2 * i + 1] = all[i] & 0xff;
  }
  return out;
}

function embeddedV4(b: Uint8Array): number {
  return ((b[12] << 24) | (b[13] << 16) | (b[14] << 8) | b[15]) >>> 0;
}

function v6Verdict(b: Uint8Array, options: IpPolicyOptions): string | null {
  const zeros = (from: number, to: number): boolean => b.subarray(from, to).every((x) => x === 0);
  if (zeros(0, 16)) return 'unspecified';
  if (zeros(0, 15) && b[15] === 1) return options.allowLoopback ? null : 'loopback';
  // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (deprecated compatible): judge the IPv4 inside.
  if (zeros(0, 10) && ((b[10] === 0xff && b[11] === 0xff) || (b[10] === 0 && b[11] === 0))) {
    return v4Verdict(embeddedV4(b), options);
  }
  // 64:ff9b::/96 NAT64: judge the IPv4 inside.
  if (b[0] === 0x00 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b && zeros(4, 12)) {
    return v4Verdict(embeddedV4(b), options);
  }
  if (b[0] === 0xff) return 'multicast';
  if ((b[0] & 0xfe) === 0xfc) return 'unique local (private)';
  if (b[0] === 0xfe && (b[1] & 0xc0) === 0x80) return 'link-local';
  if (b[0] === 0xfe && (b[1] & 0xc0) === 0xc0) return 'site-local';
  // Only global unicast 2000::/3 is routable; inside it, Teredo, 6to4 and documentation are refused.
  if ((b[0] & 0xe0) !== 0x20) return 'reserved';
  if (b[0] === 0x20 && b[1] === 0x01 && b[2] === 0x00 && b[3] === 0x00) return 'Teredo';
  if (b[0] === 0x20 && b[1] === 0x02) return '6to4';
  if (b[0] === 0x20 && b[1] === 0x01 && b[2] === 0x0d && b[3] === 0xb8) return 'documentation';
  return null;
}

/** null if a fetch may connect to `address`, else the kind of address that is refused. */
export function blockedAddressKind(address: string, options: IpPolicyOptions = {}): string | null {
  if (isIPv4(address)) return v4Verdict(parseV4(address), options);
  if (isIPv6(address)) return v6Verdict(parseV6(address), options);
  return 'not an IP address';
}

// A small forward proxy on 127.0.0.1 for proxy tests: CONNECT tunnels and absolute-URI requests,
// each one counted with its target, as a corporate proxy would see them.
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';

export class ForwardProxy {
  /** host:port of every CONNECT and every absolute-URI request, in order. */
  readonly seen: string[] = [];
  private readonly server = http.createServer((req, res) => this.forward(req, res));
  private readonly sockets = new Set<net.Socket>();
  url = '';

  async start(): Promise<void> {
    this.server.on('connect', (req: http.IncomingMessage, client: net.Socket, head: Buffer) => {
      const target = req.url ?? '';
      this.seen.push(target);
      const [host, port] = target.split(':');
      const upstream = net.connect(Number(port), host, () => {
        client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
        if (head.length > 0) upstream.write(head);
        upstream.pipe(client);
        client.pipe(upstream);
      });
      this.track(upstream);
      this.track(client);
      upstream.on('error', () => client.destroy());
      client.on('error', () => upstream.destroy());
    });
    this.server.on('connection', (s: net.Socket) => this.track(s));
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  private track(s: net.Socket): void {
    this.sockets.add(s);
    s.on('close', () => this.sockets.delete(s));
  }

  private forward(req: http.IncomingMessage, res: http.ServerResponse): void {
    let target: URL;
    try {
      target = new URL(req.url ?? '');
    } catch {
      res.writeHead(400).end('absolute URI expected');
      return;
    }
    this.seen.push(target.host);
    const up = http.request(target, { method: req.method, headers: { ...req.headers, host: target.host } }, (ur) => {
      res.writeHead(ur.statusCode ?? 502, ur.headers);
      ur.pipe(res);
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

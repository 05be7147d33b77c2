/**
 * A TCP proxy a test controls, between clients and PostgreSQL: `pass` forwards bytes both ways;
 * `drop` is a silent partition — connections stay open, bytes are swallowed in both directions,
 * nothing is answered, nothing is closed (what a broken switch or a cut VPN looks like to both
 * ends). `close()` tears every connection down.
 */
import net from 'node:net';

export interface TcpProxy {
  readonly port: number;
  /** A connection string like `url` but through the proxy. */
  url(target: string): string;
  mode: 'pass' | 'drop';
  /**
   * When set, a connection whose client sends a chunk matching it goes silent for good (a
   * partition that begins in the middle of a conversation, e.g. right after LISTEN is sent).
   */
  silenceWhen: RegExp | null;
  /** Connections accepted so far. */
  readonly accepted: number;
  close(): Promise<void>;
}

export async function startTcpProxy(
  upstreamPort: number,
  upstreamHost = '127.0.0.1',
  listenPort = 0,
): Promise<TcpProxy> {
  const sockets = new Set<net.Socket>();
  let accepted = 0;
  const proxy = {
    mode: 'pass' as 'pass' | 'drop',
    silenceWhen: null as RegExp | null,
  };
  const server = net.createServer((client) => {
    accepted++;
    const upstream = net.connect(upstreamPort, upstreamHost);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => undefined);
      socket.on('close', () => sockets.delete(socket));
    }
    let silenced = false;
    client.on('data', (chunk: Buffer) => {
      if (proxy.silenceWhen?.test(chunk.toString('latin1'))) silenced = true;
      if (proxy.mode === 'pass' && !silenced) upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (proxy.mode === 'pass' && !silenced) client.write(chunk);
    });
    client.on('end', () => upstream.end());
    upstream.on('end', () => client.end());
  });
  await new Promise<void>((resolve) => server.listen(listenPort, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return Object.assign(proxy, {
    port,
    get accepted() {
      return accepted;
    },
    url(target: string) {
      const u = new URL(target);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  });
}

/**
 * A TCP proxy between the soak's clients and PostgreSQL, one listening port ("lane") per client
 * process slot, each lane with its own mode:
 *
 *   pass ──partition()──▶ partitioned ──heal()──▶ pass
 *
 * Partitioned, a lane accepts connections and bytes but forwards nothing either way and answers
 * nothing; sockets stay open. Like a real partition where TCP keeps retransmitting, what was held
 * — bytes, and a side's close — is delivered in order on heal(). A client that gave up during
 * the partition (a statement timeout) has its close delivered to the server only then, as its
 * kernel's retransmitted FIN would be.
 *
 * What a userland proxy cannot show: the client's TCP keepalive is answered by the proxy's own
 * kernel, so keepalive never detects this partition; only timeouts in the client do.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';

type Held = { to: Socket; data?: Buffer; end?: true; destroy?: true };

/** One client connection and its upstream twin. */
class Link {
  private held: Held[] = [];

  constructor(
    private readonly lane: Lane,
    readonly client: Socket,
    readonly upstream: Socket,
  ) {
    this.pipe(client, upstream);
    this.pipe(upstream, client);
  }

  /** Delivers what the partition held, in order. */
  flush(): void {
    const held = this.held;
    this.held = [];
    for (const item of held) this.apply(item);
  }

  private pipe(from: Socket, to: Socket): void {
    from.on('data', (data: Buffer) => this.send({ to, data }));
    from.on('end', () => this.send({ to, end: true }));
    from.on('error', () => undefined);
    from.on('close', () => this.send({ to, destroy: true }));
  }

  private send(item: Held): void {
    if (this.lane.partitioned) this.held.push(item);
    else this.apply(item);
  }

  private apply(item: Held): void {
    if (item.to.destroyed) return;
    if (item.data) item.to.write(item.data);
    else if (item.end) item.to.end();
    else if (item.destroy) {
      item.to.destroy();
      this.lane.links.delete(this);
    }
  }
}

/** One listening port with its own mode. */
export class Lane {
  partitioned = false;
  readonly links = new Set<Link>();
  private readonly server: Server;
  port = 0;

  constructor(
    readonly name: string,
    private readonly target: () => number,
  ) {
    this.server = createServer((client) => this.accept(client));
  }

  async listen(): Promise<number> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(0, '127.0.0.1', () => resolve());
    });
    const address = this.server.address();
    this.port = typeof address === 'object' && address ? address.port : 0;
    return this.port;
  }

  partition(): void {
    this.partitioned = true;
  }

  heal(): void {
    this.partitioned = false;
    for (const link of [...this.links]) link.flush();
  }

  async close(): Promise<void> {
    for (const link of this.links) {
      link.client.destroy();
      link.upstream.destroy();
    }
    this.links.clear();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    client.setNoDelay(true);
    const upstream = connect({ host: '127.0.0.1', port: this.target() });
    upstream.setNoDelay(true);
    // The server is down: the upstream closes at once and the client with it (a refused connect).
    this.links.add(new Link(this, client, upstream));
  }
}

/** The proxy: a lane per name. */
export class TcpProxy {
  readonly lanes = new Map<string, Lane>();

  constructor(private readonly target: () => number) {}

  async addLane(name: string): Promise<Lane> {
    const lane = new Lane(name, this.target);
    await lane.listen();
    this.lanes.set(name, lane);
    return lane;
  }

  lane(name: string): Lane {
    const lane = this.lanes.get(name);
    if (!lane) throw new Error(`no proxy lane ${name}`);
    return lane;
  }

  async close(): Promise<void> {
    await Promise.all([...this.lanes.values()].map((lane) => lane.close()));
  }
}

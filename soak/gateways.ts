// One gateway replica of the soak: a real process (test/helpers/gateway-process.ts) on a port of its own
// that it keeps across restarts, so the load's clients find it again at the same address.
import { startGatewayProcess, type GatewayProcess } from '../test/helpers/gateway-process.ts';

export class SoakGateway {
  private proc: GatewayProcess | null = null;
  /** Starts so far (the first one included). */
  starts = 0;
  /** Exits the soak did not cause (a crash: always a finding), with the end of their stderr. */
  readonly crashes: string[] = [];
  private killing = false;

  constructor(
    readonly label: string,
    readonly url: string,
    private readonly env: Record<string, string>,
  ) {}

  get running(): boolean {
    return this.proc !== null;
  }

  async start(): Promise<void> {
    const proc = await startGatewayProcess(this.env);
    this.proc = proc;
    this.killing = false;
    this.starts++;
    void proc.exited.then((code) => {
      if (!this.killing) this.crashes.push(`${this.label} exited (${code}) on its own: ${proc.stderr().slice(-500)}`);
    });
  }

  /** SIGKILL: no drain, like a crash. */
  kill(): void {
    this.killing = true;
    this.proc?.kill('SIGKILL');
  }

  async exited(): Promise<void> {
    if (!this.proc) return;
    await this.proc.exited;
    this.proc = null;
  }

  async restart(): Promise<void> {
    await this.exited();
    await this.start();
  }

  /** The process's stderr so far (a crash's reason). */
  stderr(): string {
    return this.proc?.stderr() ?? '';
  }

  async stop(): Promise<void> {
    this.kill();
    await this.exited();
  }
}

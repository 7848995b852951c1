/**
 * Every byte the panel exchanges with the kernel or the server goes through here.
 *
 * Kernel: one comm on the target `ipy_resume`, registered by `%load_ext
 * ipy_resume`. Requests carry an `id`; the kernel answers `{id, data}` or
 * `{id, error}` and pushes `{event: "changed", events, summary, last_seq}`
 * after each `%%checkpoint` run. A kernel without the target closes the comm
 * at once: that is how "not loaded" is told apart from "busy".
 *
 * Server: `GET ipy-resume/timeline?path=NOTEBOOK` reads the store on disk
 * (read-only), which keeps the timeline visible while the kernel is dead.
 */

import { URLExt } from '@jupyterlab/coreutils';
import { Kernel, KernelMessage, ServerConnection } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import {
  CellOutcome,
  Details,
  RestoreResult,
  RunAllPlan,
  Snapshot,
  Summary,
  TimelineEvent
} from './types';

export const COMM_TARGET = 'ipy_resume';

export interface ChangedMessage {
  event: 'changed';
  events: TimelineEvent[];
  summary: Summary;
  last_seq: number | null;
  store: string;
}

/** A request the kernel could not serve, with its one-line reason. */
export class ChannelError extends Error {}

type Pending = {
  resolve: (value: unknown) => void;
  reject: (reason: Error) => void;
};

/**
 * The comm to one kernel. `open()` tells whether the kernel has ipy_resume loaded.
 *
 * ```ts
 * const channel = new KernelChannel(kernel);
 * if ((await channel.open()) === 'loaded') {
 *   const snap = await channel.snapshot();
 * }
 * ```
 */
export class KernelChannel {
  readonly kernel: Kernel.IKernelConnection;
  private comm: Kernel.IComm | null = null;
  private nextId = 1;
  private pending = new Map<number, Pending>();
  private closedByKernel = false;
  private _changed = new Signal<this, ChangedMessage>(this);
  private _outcome = new Signal<this, CellOutcome>(this);
  private _closed = new Signal<this, void>(this);
  private _disposed = false;

  constructor(kernel: Kernel.IKernelConnection) {
    this.kernel = kernel;
  }

  get changed(): ISignal<this, ChangedMessage> {
    return this._changed;
  }

  /** One `%%checkpoint` run's outcome, for its cell's badge (after `badges(true)`). */
  get outcome(): ISignal<this, CellOutcome> {
    return this._outcome;
  }

  get closed(): ISignal<this, void> {
    return this._closed;
  }

  get isOpen(): boolean {
    return this.comm !== null && !this.closedByKernel && !this._disposed;
  }

  /** Open the comm; resolves once the kernel has handled the open message. */
  async open(): Promise<'loaded' | 'not-loaded'> {
    const comm = this.kernel.createComm(COMM_TARGET);
    this.comm = comm;
    this.closedByKernel = false;
    let hello = false;
    comm.onMsg = (msg: KernelMessage.ICommMsgMsg) => {
      const data = msg.content.data as Record<string, unknown>;
      if (data.event === 'hello') {
        hello = true;
      } else {
        this.onMessage(data);
      }
    };
    comm.onClose = () => {
      this.closedByKernel = true;
      this.failAll('the kernel closed the ipy_resume channel');
      this._closed.emit();
    };
    // The kernel answers comm_open with either a hello (target found) or a
    // comm_close (no such target), both before it goes idle, so `done` is enough.
    await comm.open({ client: 'jupyterlab' }).done;
    if (this.closedByKernel || !hello) {
      this.comm = null;
      return 'not-loaded';
    }
    return 'loaded';
  }

  snapshot(after?: number | null): Promise<Snapshot> {
    return this.request<Snapshot>({ request: 'snapshot', after: after ?? null });
  }

  details(target: string): Promise<Details> {
    return this.request<Details>({ request: 'details', target });
  }

  restore(target: string): Promise<RestoreResult> {
    return this.request<RestoreResult>({ request: 'restore', target });
  }

  /**
   * Tell the kernel this front end draws cell badges: it stops writing status lines
   * and pushes outcomes. The answer carries the outcomes of cells that ran before.
   */
  badges(on: boolean): Promise<{ badges: boolean; outcomes: CellOutcome[] }> {
    return this.request({ request: 'badges', on });
  }

  /** What Run All of these code cells would restore and execute; nothing runs. */
  plan(cells: { source: string; id: string }[]): Promise<RunAllPlan> {
    return this.request<RunAllPlan>({ request: 'plan', cells });
  }

  request<T>(content: Record<string, unknown>): Promise<T> {
    const comm = this.comm;
    if (!comm || this.closedByKernel || this._disposed) {
      return Promise.reject(new ChannelError('no open channel to the kernel'));
    }
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      try {
        comm.send({ ...content, id } as any);
      } catch (err) {
        this.pending.delete(id);
        reject(new ChannelError(String(err)));
      }
    });
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this.failAll('the kernel changed');
    const comm = this.comm;
    this.comm = null;
    if (comm && !this.closedByKernel && !comm.isDisposed) {
      try {
        comm.close();
      } catch {
        // A dead kernel cannot take the close; nothing is left to clean.
      }
    }
    Signal.clearData(this);
  }

  private onMessage(data: Record<string, unknown>): void {
    if (data.event === 'changed') {
      this._changed.emit(data as unknown as ChangedMessage);
      return;
    }
    if (data.event === 'outcome') {
      this._outcome.emit(data as unknown as CellOutcome);
      return;
    }
    const id = data.id as number | undefined;
    if (id === undefined) {
      return;
    }
    const waiter = this.pending.get(id);
    if (!waiter) {
      return;
    }
    this.pending.delete(id);
    if (typeof data.error === 'string') {
      waiter.reject(new ChannelError(data.error));
    } else {
      waiter.resolve(data.data);
    }
  }

  private failAll(reason: string): void {
    for (const waiter of this.pending.values()) {
      waiter.reject(new ChannelError(reason));
    }
    this.pending.clear();
  }
}

async function getJSON<T>(endpoint: string, query: Record<string, string>): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const url =
    URLExt.join(settings.baseUrl, 'ipy-resume', endpoint) + URLExt.objectToQueryString(query);
  const response = await ServerConnection.makeRequest(url, {}, settings);
  let body: any = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok) {
    const message = body && typeof body.error === 'string' ? body.error : response.statusText;
    throw new ChannelError(`server: ${message}`);
  }
  return body as T;
}

/** The store of the notebook at `path`, read from disk by the server extension. */
export function fetchSnapshot(path: string): Promise<Snapshot> {
  return getJSON<Snapshot>('timeline', { path });
}

/** One checkpoint's details from disk, for when the kernel cannot answer. */
export function fetchDetails(path: string, target: string): Promise<Details> {
  return getJSON<Details>('details', { path, target });
}

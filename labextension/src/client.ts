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
 *
 * The messages themselves, and the request ids that pair answers with requests,
 * are in protocol.ts, which the widget's transport (widget.ts) shares.
 */

import { URLExt } from '@jupyterlab/coreutils';
import { Kernel, KernelMessage, ServerConnection } from '@jupyterlab/services';
import { JSONObject } from '@lumino/coreutils';
import { ISignal, Signal } from '@lumino/signaling';

import { ChangedMessage, ChannelError, PendingRequests, TimelineApi } from './protocol';
import { CellOutcome, Snapshot } from './types';

export const COMM_TARGET = 'ipy_resume';

/** Metadata the panel adds to every execute request of a notebook kernel. */
export const BADGES_FLAG = 'ipy_resume_badges';
const FLAGGED = Symbol('ipy-resume-flagged');

/**
 * Flag every execution of `kernel` as coming from a front end that draws badges, so a
 * cell queued before the comm opens (Run All right after `%load_ext`) writes no status
 * line either. Idempotent; a kernel restart keeps the same connection and the flag.
 */
export function flagExecutions(kernel: Kernel.IKernelConnection): void {
  const target = kernel as unknown as Record<symbol, boolean> & Kernel.IKernelConnection;
  if (target[FLAGGED]) {
    return;
  }
  const original = kernel.requestExecute.bind(kernel);
  (target as any).requestExecute = (
    content: KernelMessage.IExecuteRequestMsg['content'],
    disposeOnDone?: boolean,
    metadata?: JSONObject
  ) => original(content, disposeOnDone, { ...(metadata ?? {}), [BADGES_FLAG]: true });
  target[FLAGGED] = true;
}

/**
 * Busy or idle of a cell *execution*, from an IOPub message; null for anything else.
 * Our own comm traffic also flips the kernel's status, and reacting to that would loop.
 */
export function executionState(msg: KernelMessage.IIOPubMessage): 'busy' | 'idle' | null {
  if (msg.header.msg_type !== 'status') {
    return null;
  }
  const parent = msg.parent_header as Partial<KernelMessage.IHeader>;
  if (parent?.msg_type !== 'execute_request') {
    return null;
  }
  const state = (msg.content as KernelMessage.IStatusMsg['content']).execution_state;
  return state === 'busy' || state === 'idle' ? state : null;
}

/**
 * The comm to one kernel. `open()` tells whether the kernel has ipy_resume loaded.
 *
 * ```ts
 * const channel = new KernelChannel(kernel);
 * if ((await channel.open()) === 'loaded') {
 *   const snap = await channel.api.snapshot();
 * }
 * ```
 */
export class KernelChannel {
  readonly kernel: Kernel.IKernelConnection;
  /** The requests by name, sent over this comm. */
  readonly api = new TimelineApi(content => this.request(content));
  private comm: Kernel.IComm | null = null;
  private pending = new PendingRequests();
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
      this.pending.failAll('the kernel closed the ipy_resume channel');
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

  /** The comm's transport (see protocol.ts): one request, settled by its answer. */
  request(content: Record<string, unknown>): Promise<unknown> {
    const comm = this.comm;
    if (!comm || this.closedByKernel || this._disposed) {
      return Promise.reject(new ChannelError('no open channel to the kernel'));
    }
    return this.pending.send(content, message => comm.send(message as JSONObject));
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this.pending.failAll('the kernel changed');
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
    } else if (data.event === 'outcome') {
      this._outcome.emit(data as unknown as CellOutcome);
    } else {
      this.pending.answer(data);
    }
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

/**
 * The read-only part of the protocol, answered from the store on disk by the server
 * extension (server.py): `snapshot` and `details`. The same `request(content)` shape
 * as the comm, so a view can fall back to the disk without knowing it.
 */
export function serverRequest(path: string, content: Record<string, unknown>): Promise<unknown> {
  switch (content.request) {
    case 'snapshot':
      return getJSON('timeline', { path });
    case 'details':
      return getJSON('details', { path, target: String(content.target) });
    default:
      return Promise.reject(new ChannelError('that needs a live kernel with ipy_resume loaded'));
  }
}

/** The store of the notebook at `path`, read from disk by the server extension. */
export function fetchSnapshot(path: string): Promise<Snapshot> {
  return serverRequest(path, { request: 'snapshot' }) as Promise<Snapshot>;
}

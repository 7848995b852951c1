/**
 * What the front ends say to the kernel, whichever way it travels: the requests,
 * their answers, and the request ids that pair them.
 *
 * A request is `{id, request: NAME, ...fields}`; its answer repeats the `id` with
 * either `data` or a one-line `error`. The side panel sends requests over a comm
 * (client.ts), the widget over anywidget's custom messages (widget.ts). Free of
 * JupyterLab imports, because the widget bundle has no JupyterLab around it.
 */

import { CellOutcome, Details, RestoreResult, RunAllPlan, Snapshot, Summary, TimelineEvent } from './types';

/** A transport: sends one request and settles with its answer's `data`, or rejects. */
export type Request = (content: Record<string, unknown>) => Promise<unknown>;

/** A request the kernel (or the server) could not serve, with its one-line reason. */
export class ChannelError extends Error {}

/** Pushed by the kernel after each `%%checkpoint` run: the events since the last push. */
export interface ChangedMessage {
  event: 'changed';
  events: TimelineEvent[];
  summary: Summary;
  last_seq: number | null;
  store: string;
  /** As in a snapshot: checkpoints these events name that the store no longer has. */
  unavailable?: string[];
  /** As in a snapshot: the prefixes to show, merged over what the panel already has. */
  short_ids?: Record<string, string>;
}

type Waiter = {
  resolve: (value: unknown) => void;
  reject: (reason: Error) => void;
};

/**
 * Requests sent and not yet answered, by id. A transport posts with `send` and
 * hands every incoming message to `answer`.
 *
 * ```ts
 * const pending = new PendingRequests();
 * const request: Request = content => pending.send(content, msg => model.send(msg));
 * model.on('msg:custom', msg => pending.answer(msg));
 * ```
 */
export class PendingRequests {
  private nextId = 1;
  private waiting = new Map<number, Waiter>();

  /** Post `content` with a fresh id; settles when `answer` sees that id come back. */
  send(content: Record<string, unknown>, post: (message: Record<string, unknown>) => void): Promise<unknown> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      try {
        post({ ...content, id });
      } catch (err) {
        this.waiting.delete(id);
        reject(new ChannelError(String(err)));
      }
    });
  }

  /** Settle the request `message` answers; false when it answers none (a push, a stale id). */
  answer(message: unknown): boolean {
    const data = message as Record<string, unknown> | null;
    const id = data?.id;
    const waiter = typeof id === 'number' ? this.waiting.get(id) : undefined;
    if (!waiter) {
      return false;
    }
    this.waiting.delete(id as number);
    if (typeof data!.error === 'string') {
      waiter.reject(new ChannelError(data!.error));
    } else {
      waiter.resolve(data!.data);
    }
    return true;
  }

  /** Reject everything still waiting: the channel is gone and no answer will come. */
  failAll(reason: string): void {
    for (const waiter of this.waiting.values()) {
      waiter.reject(new ChannelError(reason));
    }
    this.waiting.clear();
  }
}

/**
 * The requests by name, with the type of each answer, over any transport.
 *
 * ```ts
 * const api = new TimelineApi(request);
 * const snap = await api.snapshot();
 * ```
 */
export class TimelineApi {
  constructor(readonly request: Request) {}

  /** The timeline; with `after`, only the events after that seq. */
  snapshot(after?: number | null): Promise<Snapshot> {
    return this.request({ request: 'snapshot', after: after ?? null }) as Promise<Snapshot>;
  }

  details(target: string): Promise<Details> {
    return this.request({ request: 'details', target }) as Promise<Details>;
  }

  restore(target: string): Promise<RestoreResult> {
    return this.request({ request: 'restore', target }) as Promise<RestoreResult>;
  }

  /**
   * Tell the kernel this front end draws cell badges: it stops writing status lines
   * and pushes outcomes. The answer carries the outcomes of cells that ran before.
   */
  badges(on: boolean): Promise<{ badges: boolean; outcomes: CellOutcome[] }> {
    return this.request({ request: 'badges', on }) as Promise<{ badges: boolean; outcomes: CellOutcome[] }>;
  }

  /** What Run All of these code cells would restore and execute; nothing runs. */
  plan(cells: { source: string; id: string }[]): Promise<RunAllPlan> {
    return this.request({ request: 'plan', cells }) as Promise<RunAllPlan>;
  }
}

/**
 * Tokens other extensions can depend on to read or drive the timeline.
 */

import { Token } from '@lumino/coreutils';
import { ISignal } from '@lumino/signaling';

import { PlanState, TimelineEvent, ViewState } from './types';

export interface ITimelineModel {
  /** Fires whenever anything the views draw has changed. */
  readonly stateChanged: ISignal<ITimelineModel, ViewState>;
  readonly state: ViewState;
  select(seq: number | null): void;
  restore(event: TimelineEvent): Promise<void>;
  goToCell(event: TimelineEvent): Promise<boolean>;
  refresh(): Promise<void>;
  /** The last Plan Run All, for the panel. */
  readonly planState: PlanState;
  planRunAll(): Promise<void>;
  clearPlan(): void;
}

export const ITimelineModel = new Token<ITimelineModel>(
  'ipy-resume:ITimelineModel',
  'The ipy_resume timeline of the current notebook.'
);

export const PLUGIN_ID = 'ipy-resume:plugin';
export const PANEL_ID = 'ipy-resume-timeline';

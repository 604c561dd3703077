/** The one trial id scheme every app uses: `<taskId>__<attempt>`. */
export function trialIdOf(taskId: string, attempt: number): string {
  return `${taskId}__${attempt}`;
}

// One formatting of durations, rates and tables for the CLI and the reports.
export { formatDuration, percent, textTable as renderTable } from "@proctor/report";

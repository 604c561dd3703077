// One formatting of rates and tables for the CLI and the reports.
export { percent, textTable as renderTable } from "@proctor/report";

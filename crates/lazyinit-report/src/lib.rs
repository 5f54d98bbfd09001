//! Statistics, tables, plots and the regression gate; reads only result CSVs

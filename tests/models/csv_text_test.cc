// The text helpers the CSV readers and the flags' lists share (models/gpu_catalog.h), on inputs whose
// answers are written out by hand.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/gpu_catalog.h"

namespace hetsim::models {
namespace {

using Strings = std::vector<std::string>;

TEST(CsvText, SplitListDropsEmptyItemsAndKeepsBlanks) {
  EXPECT_EQ(SplitList("a,b,,c"), (Strings{"a", "b", "c"}));
  EXPECT_EQ(SplitList(",a,"), (Strings{"a"}));
  EXPECT_EQ(SplitList(""), Strings{});
  EXPECT_EQ(SplitList(",,"), Strings{});
  EXPECT_EQ(SplitList("cpu-4-single"), (Strings{"cpu-4-single"}));
  EXPECT_EQ(SplitList(" a, b"), (Strings{" a", " b"}));  // a list's items are taken as written
}

TEST(CsvText, SplitCsvKeepsEmptyCellsAndReadsQuotes) {
  EXPECT_EQ(SplitCsv("a,,b"), (Strings{"a", "", "b"}));
  EXPECT_EQ(SplitCsv("\"x,y\",\"say \"\"hi\"\"\""), (Strings{"x,y", "say \"hi\""}));
  EXPECT_EQ(SplitCsv("a,"), (Strings{"a", ""}));
}

TEST(CsvText, CellsRoundTripThroughCsvCell) {
  EXPECT_EQ(CsvCell("plain"), "plain");
  EXPECT_EQ(CsvCell("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvCell("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(SplitCsv(CsvCell("a,b") + "," + CsvCell("q\"")), (Strings{"a,b", "q\""}));
  EXPECT_EQ(TrimBlanks(" \t x y \t"), "x y");
  EXPECT_EQ(TrimBlanks(" \t "), "");
}

}  // namespace
}  // namespace hetsim::models

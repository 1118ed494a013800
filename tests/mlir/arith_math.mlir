// The arith and math ops MLIR has beyond irc's first set, and op flags.

func.func @extended(%arg0: i32, %arg1: i32) -> (i32, i1, i32, i32, i32, i32) {
  %sum, %overflow = arith.addui_extended %arg0, %arg1 : i32, i1
  %low, %high = arith.mului_extended %arg0, %arg1 : i32
  %low_0, %high_1 = arith.mulsi_extended %arg0, %arg1 : i32
  return %sum, %overflow, %low, %high, %low_0, %high_1 : i32, i1, i32, i32, i32, i32
}

// -----

func.func @bits(%arg0: i32) -> (i32, i32, i32) {
  %0 = math.ctlz %arg0 : i32
  %1 = math.cttz %arg0 : i32
  %2 = math.ctpop %arg0 : i32
  return %0, %1, %2 : i32, i32, i32
}

// -----

func.func @floats(%arg0: f64, %arg1: f64) -> (f64, f64, f64, f64) {
  %0 = math.copysign %arg0, %arg1 : f64
  %1 = math.log10 %arg0 : f64
  %2 = math.tan %arg1 fastmath<fast> : f64
  %3 = arith.addf %arg0, %arg1 fastmath<nnan,ninf> : f64
  return %0, %1, %2, %3 : f64, f64, f64, f64
}

// -----

func.func @flags(%arg0: i64, %arg1: i64) -> i64 {
  %0 = arith.muli %arg0, %arg1 overflow<nuw> : i64
  %1 = arith.shli %0, %arg1 overflow<nsw> : i64
  %2 = arith.subi %1, %arg0 : i64
  return %2 : i64
}

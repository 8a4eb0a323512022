# Regenerates sim_bridge_pb2.py and fails if the committed copy differs.
file(MAKE_DIRECTORY ${OUT})
execute_process(COMMAND ${PROTOC} --python_out=${OUT} -I${SRC}/proto ${SRC}/proto/sim_bridge.proto
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "protoc failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT}/sim_bridge_pb2.py
                        ${SRC}/sim_bridge/python/rlforge_sim/sim_bridge_pb2.py
                RESULT_VARIABLE diff)
if(NOT diff EQUAL 0)
  message(FATAL_ERROR "sim_bridge/python/rlforge_sim/sim_bridge_pb2.py is stale; run: "
                      "protoc --python_out=sim_bridge/python/rlforge_sim -Iproto proto/sim_bridge.proto")
endif()
